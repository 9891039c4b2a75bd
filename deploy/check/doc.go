// Package check validates Concord's deployment files (deploy/) with
// third-party parsers kept out of the main module: the compose file with the
// compose-spec loader, the Kubernetes manifests by strict decoding into the
// k8s.io/api types, and the Dockerfile with BuildKit's parser and linter.
// Its tests also run the command lines of those files as local processes,
// and the tenants' NATS configuration (deploy/nats/accounts.conf) in the
// nats-server Concord embeds.
package check
