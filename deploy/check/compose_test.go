package check

import (
	"context"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads deploy/compose.yaml the way `docker compose` does:
// interpolation, merge keys, the compose JSON schema and the consistency
// checks (undefined volumes or networks, and so on).
// With profiles, the services of those profiles come too.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	dir := filepath.Join(repoRoot, "deploy")
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml")}},
		Environment: types.Mapping{},
	}, loader.WithProfiles(profiles))
	if err != nil {
		t.Fatalf("compose.yaml (profiles %v) does not load: %v", profiles, err)
	}
	return p
}

// TestComposeFile checks the structure of the cluster the compose file
// describes: one bootstrapping node and two joining ones, each reachable
// by its service name for Raft and NATS routes, with its data on its own
// named volume, a fixed address in the network's subnet, and no health
// check (the image has no program to run one).
func TestComposeFile(t *testing.T) {
	p := loadCompose(t)
	names := p.ServiceNames()
	slices.Sort(names)
	if strings.Join(names, ",") != "n1,n2,n3" {
		t.Fatalf("services %v, want n1, n2, n3", names)
	}
	var bootstraps, joins int
	volumes := map[string]string{}
	addrs := map[string]string{}
	for _, name := range names {
		s := p.Services[name]
		args := []string(s.Command)
		if len(args) == 0 || args[0] != "serve" {
			t.Fatalf("%s: command %q does not start with serve (the image's entrypoint is /concord)", name, args)
		}
		if id, _ := flagValue(args, "node-id"); id != name {
			t.Errorf("%s: --node-id %q, want the service name", name, id)
		}
		switch {
		case hasFlag(args, "bootstrap") && !hasFlag(args, "join"):
			bootstraps++
		case hasFlag(args, "join") && !hasFlag(args, "bootstrap"):
			joins++
		default:
			t.Errorf("%s: give exactly one of --bootstrap and --join", name)
		}
		raft, _ := flagValue(args, "raft-addr")
		if host, _, err := net.SplitHostPort(raft); err != nil || host != name {
			t.Errorf("%s: --raft-addr %q: want %s:<port>, the service name the peers resolve", name, raft, name)
		}
		cluster, _ := flagValue(args, "nats-cluster")
		routes, _ := flagValue(args, "nats-routes")
		for _, other := range names {
			want := "nats://" + other + ":" + strconv.Itoa(portOf(t, cluster))
			if !slices.Contains(strings.Split(routes, ","), want) {
				t.Errorf("%s: --nats-routes %q lacks %s", name, routes, want)
			}
		}
		if s.HealthCheck != nil && !s.HealthCheck.Disable {
			t.Errorf("%s: has a healthcheck, but the image has no program to run one", name)
		}
		// The schema takes any string here; Docker refuses others at start.
		if !regexp.MustCompile(`^(no|always|unless-stopped|on-failure(:[0-9]+)?)$`).MatchString(s.Restart) {
			t.Errorf("%s: restart %q is not a Docker restart policy", name, s.Restart)
		}
		if s.Image == "" || s.User != "" {
			t.Errorf("%s: image %q, user %q: want the image, run as its own user", name, s.Image, s.User)
		}
		dataDir, _ := flagValue(args, "data-dir")
		var mounted bool
		for _, v := range s.Volumes {
			if v.Target == dataDir && v.Type == types.VolumeTypeVolume {
				if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s: volume %q is not declared", name, v.Source)
				}
				if other, ok := volumes[v.Source]; ok {
					t.Errorf("%s and %s share volume %s", name, other, v.Source)
				}
				volumes[v.Source] = name
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s: no named volume at --data-dir %q: its data would die with the container", name, dataDir)
		}
		for netName, n := range s.Networks {
			if n == nil || n.Ipv4Address == "" {
				t.Errorf("%s: network %s: no fixed ipv4_address (the README promises stable addresses)", name, netName)
				continue
			}
			ip := net.ParseIP(n.Ipv4Address)
			var inSubnet bool
			for _, c := range p.Networks[netName].Ipam.Config {
				_, subnet, err := net.ParseCIDR(c.Subnet)
				inSubnet = inSubnet || (err == nil && subnet.Contains(ip))
			}
			if !inSubnet {
				t.Errorf("%s: ipv4_address %s is not in network %s's subnet", name, n.Ipv4Address, netName)
			}
			if other, ok := addrs[n.Ipv4Address]; ok {
				t.Errorf("%s and %s share address %s", name, other, n.Ipv4Address)
			}
			addrs[n.Ipv4Address] = name
		}
		if len(s.Networks) == 0 {
			t.Errorf("%s: on no network of the file, so without a fixed address", name)
		}
	}
	if bootstraps != 1 || joins != 2 {
		t.Errorf("%d bootstrapping and %d joining nodes, want 1 and 2", bootstraps, joins)
	}
	// The client port of one node is published on the host.
	n1 := p.Services["n1"]
	listen, _ := flagValue(n1.Command, "nats-listen")
	var published bool
	for _, port := range n1.Ports {
		published = published || (int(port.Target) == portOf(t, listen) && port.Published != "")
	}
	if !published {
		t.Errorf("n1 publishes no host port for its NATS clients (%s)", listen)
	}
}

// TestComposeCluster runs the three services' command lines as local
// processes, host names and ports mapped to free loopback ports, and checks
// that they form one cluster that serves.
func TestComposeCluster(t *testing.T) {
	startComposeCluster(t, loadCompose(t))
}

// startComposeCluster runs the compose file's Concord services as local
// processes (see TestComposeCluster), checks that they form a cluster, and
// returns them with their NATS URLs and metrics addresses.
func startComposeCluster(t *testing.T, p *types.Project) (procs []*proc, urls, metrics []string) {
	t.Helper()
	names := p.ServiceNames()
	slices.Sort(names)
	l := newLocalizer(t)
	for _, name := range names {
		l.addHost(name, p.Services[name].Hostname)
	}
	for _, name := range names {
		s := p.Services[name]
		dataDir, _ := flagValue(s.Command, "data-dir")
		args := l.args(name, s.Command, dataDir, filepath.Join(t.TempDir(), "data"))
		procs = append(procs, start(t, name, append([]string{concordBin}, args...)))
		listen, _ := flagValue(s.Command, "nats-listen")
		urls = append(urls, "nats://"+l.local(name, portOf(t, listen)))
		m, _ := flagValue(s.Command, "metrics-listen")
		metrics = append(metrics, l.local(name, portOf(t, m)))
	}
	checkCluster(t, procs, names, urls, metrics)
	return procs, urls, metrics
}
