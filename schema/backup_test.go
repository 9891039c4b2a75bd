package schema

import (
	"bytes"
	"errors"
	"testing"
)

func TestBackupChunkHeadersRoundTrip(t *testing.T) {
	for _, r := range []ClusterBackupChunkReply{
		{ID: sampleBackupID, Offset: 0, Size: 5, Data: []byte("hello")},
		{ID: sampleBackupID, Offset: 262144, Size: 183220000, Data: bytes.Repeat([]byte{0, 0xff}, 100)},
		{ID: sampleBackupID, Offset: 5, Size: 5, Data: nil}, // at the end
	} {
		got, err := ParseBackupChunk(r.Header(), r.Data)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got.ID != r.ID || got.Offset != r.Offset || got.Size != r.Size || !bytes.Equal(got.Data, r.Data) {
			t.Fatalf("got %+v, want %+v", got, r)
		}
	}
}

func TestParseBackupChunkRefuses(t *testing.T) {
	good := (&ClusterBackupChunkReply{ID: sampleBackupID, Offset: 10, Size: 20}).Header()
	with := func(name, value string) map[string][]string {
		h := map[string][]string{}
		for k, v := range good {
			h[k] = v
		}
		if value == "" {
			delete(h, name)
		} else {
			h[name] = []string{value}
		}
		return h
	}
	for _, c := range []struct {
		name   string
		header map[string][]string
		body   []byte
	}{
		{"no headers", nil, nil},
		{"no id", with(HeaderBackupID, ""), nil},
		{"no offset", with(HeaderBackupOffset, ""), nil},
		{"a negative offset", with(HeaderBackupOffset, "-1"), nil},
		{"an offset that is no number", with(HeaderBackupOffset, "1e3"), nil},
		{"no size", with(HeaderBackupSize, ""), nil},
		{"a size that is no number", with(HeaderBackupSize, "twenty"), nil},
		{"a body past the size", good, make([]byte, 11)},
	} {
		if _, err := ParseBackupChunk(c.header, c.body); !errors.Is(err, ErrBadChunkReply) {
			t.Errorf("%s: %v, want ErrBadChunkReply", c.name, err)
		}
	}
	if _, err := ParseBackupChunk(good, make([]byte, 10)); err != nil {
		t.Errorf("a body up to the size: %v", err)
	}
}
