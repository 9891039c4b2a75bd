package serving

import "testing"

func TestCheckReply(t *testing.T) {
	cases := []struct {
		prefix, reply, want string
	}{
		{"concord", "", ""}, // a plain publish: nothing is sent
		{"concord", "_INBOX.abc.def", ""},
		{"concord", "my.replies.1", ""},
		{"concord", "concordx.replies", ""}, // another token, not the prefix
		{"concord", "a*b.c>", ""},           // '*' and '>' inside a token are literal
		{"concord", "concord", replyRefusedOwnSpace},
		{"concord", "concord.watch.svc.api.n1", replyRefusedOwnSpace},
		{"concord", "concord.kv.put", replyRefusedOwnSpace},
		{"concord", "concord.cluster.join", replyRefusedOwnSpace},
		{"acme.concord", "acme.concord.watch.k", replyRefusedOwnSpace},
		{"acme.concord", "acme.other", ""},
		{"concord", "$SRV.PING", replyRefusedSystem},
		{"concord", "$SYS.REQ.SERVER.PING", replyRefusedSystem},
		{"concord", "_INBOX.*", replyRefusedInvalid},
		{"concord", "_INBOX.>", replyRefusedInvalid},
		{"concord", ">", replyRefusedInvalid},
		{"concord", "*.watch", replyRefusedInvalid},
		{"concord", "a..b", replyRefusedInvalid},
		{"concord", ".a", replyRefusedInvalid},
		{"concord", "a.", replyRefusedInvalid},
		{"concord", "a b", replyRefusedInvalid},
		{"concord", "a\tb", replyRefusedInvalid},
		{"concord", "a\x7fb", replyRefusedInvalid},
	}
	for _, c := range cases {
		if got := checkReply(c.prefix, c.reply); got != c.want {
			t.Errorf("checkReply(%q, %q) = %q, want %q", c.prefix, c.reply, got, c.want)
		}
	}
}
