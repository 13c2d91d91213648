// Package test checks the Kubernetes manifests in deploy/kubernetes
// without a cluster: every manifest decodes strictly into the Kubernetes
// API types, their cross-references hold, and reconfd starts with the
// Deployment's configuration, arguments and environment, laid out as the
// kubelet would, and answers every probe; a fleet replica does so against
// an etcd member served over TLS with authentication on, its user limited
// to the fleet's prefix. It is a module of its own so
// that the library's go.mod carries no Kubernetes types.
package test
