package client

// SetRenewBatch makes c name at most n leases in one keepalive_many, so a
// test can send the server a request it refuses. Call it before c's first
// session.
func SetRenewBatch(c *Client, n int) { c.renewBatch = n }

// RangeTokens exposes rangeTokens to the external tests.
var RangeTokens = rangeTokens
