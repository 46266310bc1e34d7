package k8s

import (
	"regexp"
	"testing"
)

// composePostgresImage is the form of compose's Postgres image: postgres:<major>.<minor>
// and the Debian release it is built on.
var composePostgresImage = regexp.MustCompile(`^postgres:(\d+\.\d+)-([a-z]+)$`)

// cnpgImage is the form of a CloudNativePG operand image the project still builds:
// <major>.<minor>-<flavour>-<debian>. The bare rolling tags (15, 17.6) named the
// deprecated "system" flavour on Debian bullseye and are no longer built, so an image
// of that form gets no more fixes.
var cnpgImage = regexp.MustCompile(`^ghcr\.io/cloudnative-pg/postgresql:(\d+\.\d+)-(minimal|standard)-([a-z]+)$`)

// Production runs the server versions compose runs, which the deploy tests boot: the
// RabbitmqCluster compose's RabbitMQ image, and every CloudNativePG Cluster compose's
// Postgres minor on compose's Debian release. (The local overlay's images are compose's
// by TestLocalMatchesCompose.)
func TestProductionRunsComposesServerVersions(t *testing.T) {
	c := loadCompose(t)
	b := build(t, production)

	rabbit := c.Services["rabbitmq"].Image
	for _, o := range b.all("RabbitmqCluster") {
		if img := dig(o.fields(t), "spec", "image"); img != rabbit {
			t.Errorf("RabbitmqCluster %s runs %v, compose %s", o.Name, img, rabbit)
		}
	}

	pg := composePostgresImage.FindStringSubmatch(c.Services["postgres"].Image)
	if pg == nil {
		t.Fatalf("compose's Postgres image %q is not postgres:<major>.<minor>-<debian>", c.Services["postgres"].Image)
	}
	clusters := b.all("Cluster")
	if len(clusters) == 0 {
		t.Fatal("production has no CloudNativePG Cluster")
	}
	for _, o := range clusters {
		img, _ := dig(o.fields(t), "spec", "imageName").(string)
		m := cnpgImage.FindStringSubmatch(img)
		switch {
		case m == nil:
			t.Errorf("Cluster %s: imageName %q is not ghcr.io/cloudnative-pg/postgresql:<major>.<minor>-<minimal|standard>-<debian>", o.Name, img)
		case m[1] != pg[1] || m[3] != pg[2]:
			t.Errorf("Cluster %s runs Postgres %s on %s, compose %s on %s", o.Name, m[1], m[3], pg[1], pg[2])
		}
	}
}
