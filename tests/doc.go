// Package tests holds Concord's black-box tests: they build the real
// `concord` binary, start it on loopback ports in temporary directories, and
// talk to it over NATS exactly as any client would. Every reply and event
// they see is validated against its JSON Schema in schema/.
package tests
