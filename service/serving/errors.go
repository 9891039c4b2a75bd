package serving

import (
	"errors"
	"fmt"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// errorFor maps an error from the state machine or Raft to its wire form. A
// *schema.Error is already one; a state machine error carries its reply's
// name (fsm.WireName), ErrBadCommand's being internal; anything else is a
// fault of the server, so internal too.
func errorFor(err error) *schema.Error {
	var se *schema.Error
	if errors.As(err, &se) {
		return se
	}
	if name, ok := fsm.WireName(err); ok {
		return schema.Errorf(name, "%s", err)
	}
	return schema.Errorf(schema.ErrInternal, "%s", fmt.Sprint(err))
}
