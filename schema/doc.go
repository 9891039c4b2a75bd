// Package schema holds Concord's wire format: the Go types of every request,
// reply and watch event, the error table, and the JSON Schemas (embedded from
// json/) that describe the same messages for clients in other languages.
// Service, client and tests share these definitions so the format has one
// source; the tests validate every reply and event they see against them.
package schema
