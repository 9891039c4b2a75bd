package client

// RangeTokens exposes rangeTokens to the external tests.
var RangeTokens = rangeTokens
