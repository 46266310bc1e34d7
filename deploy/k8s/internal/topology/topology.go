// Package topology renders Bookstore's broker topology (services/contracts.Topology, with
// the arguments and the policy of services/platform/broker) as Messaging Topology
// Operator objects: the dead-letter queues' Policy, an Exchange for each exchange, a Queue
// for each queue and its dead-letter queue, and a Binding for each of their bindings, all
// in one RabbitmqCluster and vhost. Manifest is
// the one source of deploy/k8s/overlays/production/broker/topology.yaml, which
// internal/overlays writes (`make generate-k8s`).
package topology

import (
	"bytes"
	"fmt"
	"maps"

	"sigs.k8s.io/yaml"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
)

const (
	// APIVersion is the Messaging Topology Operator's API (testdata/crds holds its CRDs).
	APIVersion = "rabbitmq.com/v1beta1"
	// Cluster is the RabbitmqCluster of the production overlay (broker/rabbitmq.yaml).
	Cluster = "rabbitmq"
	// Vhost is the vhost of deploy/rabbitmq/definitions.json and of the users' Permissions.
	Vhost = "/"
)

// Object is one custom resource.
type Object struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       any      `json:"spec"`
}

// Metadata is the part of ObjectMeta these objects set.
type Metadata struct {
	Name string `json:"name"`
}

// ClusterReference names the RabbitmqCluster, in the object's own namespace.
type ClusterReference struct {
	Name string `json:"name"`
}

// ExchangeSpec is the operator's Exchange spec, the fields Bookstore sets.
type ExchangeSpec struct {
	Name                     string           `json:"name"`
	Vhost                    string           `json:"vhost"`
	Type                     string           `json:"type"`
	Durable                  bool             `json:"durable"`
	RabbitmqClusterReference ClusterReference `json:"rabbitmqClusterReference"`
}

// QueueSpec is the operator's Queue spec. The operator declares a queue with Type as its
// x-queue-type argument, added to Arguments (rabbit-hole's DeclareQueue), so Arguments
// holds the others.
type QueueSpec struct {
	Name                     string           `json:"name"`
	Vhost                    string           `json:"vhost"`
	Type                     string           `json:"type"`
	Durable                  bool             `json:"durable"`
	Arguments                map[string]any   `json:"arguments,omitempty"`
	DeletionPolicy           string           `json:"deletionPolicy"`
	RabbitmqClusterReference ClusterReference `json:"rabbitmqClusterReference"`
}

// BindingSpec is the operator's Binding spec. It has no arguments field: none of
// Bookstore's bindings has arguments, and the operator can delete a binding only when
// the field is absent (it cannot compute the properties key of one with arguments).
type BindingSpec struct {
	Vhost                    string           `json:"vhost"`
	Source                   string           `json:"source"`
	Destination              string           `json:"destination"`
	DestinationType          string           `json:"destinationType"`
	RoutingKey               string           `json:"routingKey"`
	RabbitmqClusterReference ClusterReference `json:"rabbitmqClusterReference"`
}

// PolicySpec is the operator's Policy spec.
type PolicySpec struct {
	Name                     string           `json:"name"`
	Vhost                    string           `json:"vhost"`
	Pattern                  string           `json:"pattern"`
	ApplyTo                  string           `json:"applyTo"`
	Priority                 int              `json:"priority"`
	Definition               map[string]any   `json:"definition"`
	RabbitmqClusterReference ClusterReference `json:"rabbitmqClusterReference"`
}

// BindingName is a Binding's object name: its queue and routing key, which together are
// unique in Bookstore's topology, joined by "--" (queue names and routing keys hold
// single dashes and dots, so the two parts stay apart in a DNS subdomain name).
func BindingName(queue, routingKey string) string { return queue + "--" + routingKey }

// Objects is t as the operator's objects: the dead-letter queues' policy
// (broker.DeadLetterPolicy), then in the order broker.Topology.Declare declares them the
// two exchanges, then for each queue its dead-letter queue, the dead-letter
// binding, the queue and its bindings.
func Objects(t broker.Topology) ([]Object, error) {
	if t.Exchange == "" || t.DeadLetterExchange == "" {
		return nil, fmt.Errorf("topology: no exchange named (exchange %q, dead-letter exchange %q)", t.Exchange, t.DeadLetterExchange)
	}
	ref := ClusterReference{Name: Cluster}
	exchange := func(name, typ string) Object {
		return Object{APIVersion, "Exchange", Metadata{name},
			ExchangeSpec{Name: name, Vhost: Vhost, Type: typ, Durable: true, RabbitmqClusterReference: ref}}
	}
	queue := func(name string, args map[string]any) (Object, error) {
		args = maps.Clone(args)
		typ, _ := args["x-queue-type"].(string)
		if typ == "" {
			return Object{}, fmt.Errorf("topology: queue %s has no x-queue-type", name)
		}
		delete(args, "x-queue-type")
		if len(args) == 0 {
			args = nil
		}
		// retain: deleting the object (kubectl delete -k, a rename) leaves the queue and
		// the messages in it; the operator's default, delete, would drop them.
		return Object{APIVersion, "Queue", Metadata{name},
			QueueSpec{Name: name, Vhost: Vhost, Type: typ, Durable: true, Arguments: args, DeletionPolicy: "retain", RabbitmqClusterReference: ref}}, nil
	}
	binding := func(exchange, queue, key string) Object {
		return Object{APIVersion, "Binding", Metadata{BindingName(queue, key)},
			BindingSpec{Vhost: Vhost, Source: exchange, Destination: queue, DestinationType: "queue", RoutingKey: key, RabbitmqClusterReference: ref}}
	}

	p := broker.DeadLetterPolicy()
	objs := []Object{
		{APIVersion, "Policy", Metadata{p.Name}, PolicySpec{Name: p.Name, Vhost: Vhost, Pattern: p.Pattern,
			ApplyTo: p.ApplyTo, Priority: p.Priority, Definition: p.Definition, RabbitmqClusterReference: ref}},
		exchange(t.Exchange, "topic"), exchange(t.DeadLetterExchange, "direct"),
	}
	for _, q := range t.Queues {
		dlq, err := queue(q.DLQ(), broker.DLQArgs())
		if err != nil {
			return nil, err
		}
		work, err := queue(q.Name, t.QueueArgs(q))
		if err != nil {
			return nil, err
		}
		objs = append(objs, dlq, binding(t.DeadLetterExchange, q.DLQ(), q.Name), work)
		for _, key := range q.Bindings {
			objs = append(objs, binding(t.Exchange, q.Name, key))
		}
	}
	return objs, nil
}

const header = `# Code generated by make generate-k8s (deploy/k8s/internal/overlays); DO NOT EDIT.
#
# The whole broker topology of services/contracts.Topology, with the arguments of
# services/platform/broker (QueueArgs, DLQArgs, DeadLetterPolicy), as Messaging Topology
# Operator objects: the dead-letter queues' policy (their delivery limit), the exchanges, each queue (quorum, x-delivery-limit, dead-lettered to its queue's key on
# bookstore.dlx), each dead-letter queue, and every binding, as
# deploy/rabbitmq/definitions.json declares them under docker compose. They are applied,
# and Ready, before any service runs (docs/kubernetes.md): an event is published only
# once every queue bound to its type exists.
`

// Manifest is the generated file: Bookstore's whole topology (contracts.Topology).
func Manifest() ([]byte, error) {
	objs, err := Objects(contracts.Topology)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(header)
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}
