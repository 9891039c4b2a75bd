package fsm

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"strings"
)

// cmdGen produces a random but seeded stream of log entries that mixes every
// command, with plenty of failing ones (unknown and anonymous leases,
// conflicts, taken ids, limits) and some undecodable entries. It looks at a
// state (the one under test, or a shadow) to pick lease ids that exist most
// of the time, so the stream exercises real attachments and expiries.
type cmdGen struct {
	r    *rand.Rand
	now  int64
	keys []string
}

func newCmdGen(seed int64) *cmdGen {
	g := &cmdGen{r: rand.New(rand.NewSource(seed)), now: 1_000_000}
	tokens := []string{"a", "b", "svc", "x-1", "Z"}
	for _, t1 := range tokens {
		g.keys = append(g.keys, t1)
		for _, t2 := range tokens[:3] {
			g.keys = append(g.keys, t1+"."+t2)
			g.keys = append(g.keys, t1+"."+t2+".n"+t2)
		}
	}
	return g
}

// prefixes are delete/get prefixes, including "" (everything).
var genPrefixes = []string{"", "a", "a.", "svc.", "svc.b", "x", "Z.a.", "q"}

func (g *cmdGen) key() string { return g.keys[g.r.Intn(len(g.keys))] }

// leaseID picks a lease id: mostly one that exists in s, sometimes any id
// (possibly gone, anonymous or never granted).
func (g *cmdGen) leaseID(s *State) int64 {
	if g.r.Intn(10) < 7 {
		list := s.LeaseList(g.r.Intn(4) == 0, 0, math.MaxInt, s.Now()).Leases
		if len(list) > 0 {
			return list[g.r.Intn(len(list))].ID
		}
	}
	return 1 + g.r.Int63n(s.nextLeaseID+3)
}

func (g *cmdGen) ttl() int64 { return 1 + g.r.Int63n(6) }

func (g *cmdGen) value() json.RawMessage {
	switch g.r.Intn(5) {
	case 0:
		return json.RawMessage(fmt.Sprintf("%d", g.r.Intn(1000)))
	case 1:
		return json.RawMessage(fmt.Sprintf(`{"addr":"10.0.0.%d","tags":["<&>",%v]}`, g.r.Intn(256), g.r.Intn(2) == 0))
	case 2:
		return json.RawMessage(`"` + strings.Repeat("v", g.r.Intn(40)) + `"`)
	case 3:
		return json.RawMessage(`null`)
	}
	return json.RawMessage(`[1,2.5,"é\u00e9"]`)
}

// next returns the next entry, stamped with the generator's clock; about one
// in twenty is stamped earlier than the clock, as concurrent proposals are.
func (g *cmdGen) next(s *State) []byte {
	g.now += int64(g.r.Intn(400))
	if g.r.Intn(100) == 0 {
		g.now += 10_000 // a pause: many leases expire at once
	}
	now := g.now
	if g.r.Intn(20) == 0 {
		now -= int64(g.r.Intn(3_000))
	}
	var body any
	switch p := g.r.Intn(100); {
	case p < 12:
		gr := &Grant{TTL: g.ttl()}
		switch g.r.Intn(8) {
		case 0:
			gr.ID = g.leaseID(s) // mostly taken
		case 1:
			gr.ID = s.nextLeaseID + g.r.Int63n(5) // ahead of the counter
		}
		if g.r.Intn(4) == 0 {
			gr.Metadata = json.RawMessage(fmt.Sprintf(`{"owner":"o%d"}`, g.r.Intn(9)))
		}
		body = gr
	case p < 27:
		k := &KeepAlive{ID: g.leaseID(s)}
		if g.r.Intn(3) == 0 {
			k.TTL = g.ttl()
		}
		body = k
	case p < 31:
		body = &Revoke{ID: g.leaseID(s)}
	case p < 64:
		pt := &Put{Key: g.key(), Value: g.value(), PrevKV: g.r.Intn(3) == 0}
		switch g.r.Intn(10) {
		case 0, 1, 2, 3:
			pt.Lease = g.leaseID(s)
		case 4, 5, 6:
			pt.TTL = g.ttl()
		}
		body = pt
	case p < 74:
		d := &Delete{Key: g.key(), PrevKV: g.r.Intn(2) == 0}
		if g.r.Intn(3) == 0 {
			d.Key, d.IsPrefix = genPrefixes[g.r.Intn(len(genPrefixes))], true
		}
		body = d
	case p < 90:
		// What a leader's ticker proposes, plus noise: live and unknown ids.
		e := &Expire{IDs: s.Expired(now, 1+g.r.Intn(50))}
		for i := g.r.Intn(3); i > 0; i-- {
			e.IDs = append(e.IDs, g.leaseID(s))
		}
		body = e
	case p < 95:
		body = &Expire{}
	case p < 97:
		body = &Limits{MaxLeases: 5 + g.r.Int63n(40), MaxKeysPerLease: 1 + g.r.Int63n(8)}
	default:
		// An entry that does not decode.
		data, _ := Encode(now, &Revoke{ID: 1})
		switch g.r.Intn(4) {
		case 0:
			return data[:g.r.Intn(len(data))]
		case 1:
			data[0] = 9
		case 2:
			data[1] = 0
		default:
			data = append(data, 0) // trailing bytes
		}
		return data
	}
	data, err := Encode(now, body)
	if err != nil {
		panic(err)
	}
	return data
}

// genLog generates n entries against a shadow state, so that the ids it
// picks are realistic, and returns them with the shadow.
func genLog(seed int64, n int) ([][]byte, *State) {
	g := newCmdGen(seed)
	shadow := New()
	log := make([][]byte, n)
	for i := range log {
		log[i] = g.next(shadow)
		shadow.Apply(log[i])
	}
	return log, shadow
}
