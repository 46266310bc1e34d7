package k8s

import (
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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

// The local overlay keeps the servers' data as compose does: each StatefulSet's claim is
// named as compose's volume (for the major version or series that wrote it, so a claim
// an older version wrote is never mounted into the new one) and mounted where compose
// mounts it, and neither sets PGDATA. Compose's mount is the image's own data volume
// (deploy's TestComposePostgresVolumeHoldsTheDatabase): from Postgres 18 on
// /var/lib/postgresql, whose entrypoint refuses a volume at the old /var/lib/postgresql/data.
func TestLocalKeepsTheServersDataWhereComposeDoes(t *testing.T) {
	c := loadCompose(t)
	b := build(t, local)
	for _, name := range []string{"postgres", "rabbitmq"} {
		want := map[string]string{} // volume -> target
		for _, v := range c.Services[name].Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && !strings.HasPrefix(parts[0], ".") && !strings.HasPrefix(parts[0], "/") {
				want[parts[0]] = parts[1]
			}
		}
		if len(want) != 1 {
			t.Errorf("compose's %s mounts named volumes %v, want one", name, want)
			continue
		}
		o, ok := b.get("StatefulSet", name)
		if !ok {
			t.Errorf("the local overlay has no StatefulSet %s", name)
			continue
		}
		ss := o.Typed.(*appsv1.StatefulSet)
		claims := map[string]bool{}
		for _, pvc := range ss.Spec.VolumeClaimTemplates {
			claims[pvc.Name] = true
		}
		have := map[string]string{}
		container := ss.Spec.Template.Spec.Containers[0]
		for _, m := range container.VolumeMounts {
			if claims[m.Name] {
				have[m.Name] = m.MountPath
			}
		}
		for volume, target := range want {
			if have[volume] != target {
				t.Errorf("StatefulSet %s mounts claims %v, compose volume %s at %s", name, have, volume, target)
			}
		}
		if len(have) != len(want) {
			t.Errorf("StatefulSet %s mounts claims %v, compose %v", name, have, want)
		}
		for _, e := range container.Env {
			if e.Name == "PGDATA" {
				t.Errorf("StatefulSet %s sets PGDATA=%s: leave it at the image's default, inside the claim", name, e.Value)
			}
		}
	}
}
