package schema_test

import (
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/schema/schematest"
)

// The request examples shared with the service's tests: the valid ones
// validate, the invalid ones do not, and every lease and kv request has
// some of each.
func TestRequestExamples(t *testing.T) {
	valid, invalid := map[string]int{}, map[string]int{}
	for i, ex := range schematest.ValidRequests() {
		valid[ex.Message]++
		if err := schema.Validate(ex.Message, []byte(ex.Body)); err != nil {
			t.Errorf("valid #%d %s %s rejected: %v", i, ex.Message, ex.Body, err)
		}
	}
	for i, ex := range schematest.InvalidRequests() {
		invalid[ex.Message]++
		if err := schema.Validate(ex.Message, []byte(ex.Body)); err == nil {
			t.Errorf("invalid #%d %s %s accepted", i, ex.Message, ex.Body)
		}
	}
	for _, name := range schema.Names() {
		if !strings.HasSuffix(name, ".request") || strings.HasPrefix(name, "cluster.") {
			continue
		}
		if valid[name] == 0 {
			t.Errorf("no valid example for %s", name)
		}
		if invalid[name] == 0 {
			t.Errorf("no invalid example for %s", name)
		}
	}
	for name := range valid {
		if !strings.HasSuffix(name, ".request") || strings.HasPrefix(name, "cluster.") {
			t.Errorf("valid example of %s: schematest holds lease and kv requests only", name)
		}
	}
}
