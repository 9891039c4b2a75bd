package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// manifests holds every object of deploy/k8s, decoded strictly.
type manifests struct {
	sets     []*appsv1.StatefulSet
	services []*corev1.Service
	pdbs     []*policyv1.PodDisruptionBudget
}

// loadManifests decodes every YAML document in deploy/k8s into its
// k8s.io/api type with sigs.k8s.io/yaml's UnmarshalStrict, which rejects
// unknown and duplicate fields and values of the wrong type (a quantity
// that does not parse, a string for a number). A kind the checks do not
// know fails too.
func loadManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s: %v", err)
	}
	var m manifests
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(b) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s, document %d: %v", filepath.Base(f), i+1, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 StatefulSet":
				s := &appsv1.StatefulSet{}
				m.sets = append(m.sets, s)
				obj = s
			case "v1 Service":
				s := &corev1.Service{}
				m.services = append(m.services, s)
				obj = s
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				m.pdbs = append(m.pdbs, p)
				obj = p
			default:
				t.Fatalf("%s, document %d: kind %q %q is not checked here; add it to loadManifests", filepath.Base(f), i+1, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s, document %d (%s): %v", filepath.Base(f), i+1, tm.Kind, err)
			}
		}
	}
	return m
}

// splitYAML splits a multi-document YAML file at its --- lines, dropping
// documents that hold only comments.
func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var content bool
		for _, line := range strings.Split(d, "\n") {
			s := strings.TrimSpace(line)
			content = content || (s != "" && !strings.HasPrefix(s, "#"))
		}
		if content {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// pod is one pod of a StatefulSet as the kubelet would start it.
type pod struct {
	name      string
	set       *appsv1.StatefulSet
	container corev1.Container
	argv      []string // command + args, $(VAR) expanded
	env       []string // NAME=value, what the container sees
}

const testNamespace = "concord-test"

// pods expands the StatefulSets into their pods: name <set>-<ordinal>, and
// command and args with $(VAR) substituted from the container's env the way
// the kubelet does (downward API metadata.name and metadata.namespace).
func (m manifests) pods(t *testing.T) []pod {
	t.Helper()
	var out []pod
	for _, s := range m.sets {
		if len(s.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", s.Name, len(s.Spec.Template.Spec.Containers))
		}
		c := s.Spec.Template.Spec.Containers[0]
		replicas := 1
		if s.Spec.Replicas != nil {
			replicas = int(*s.Spec.Replicas)
		}
		for i := range replicas {
			name := fmt.Sprintf("%s-%d", s.Name, i)
			vars := map[string]string{}
			var env []string
			for _, e := range c.Env {
				v := e.Value
				if e.ValueFrom != nil {
					if e.ValueFrom.FieldRef == nil {
						t.Fatalf("%s: env %s: only fieldRef is simulated here", s.Name, e.Name)
					}
					switch e.ValueFrom.FieldRef.FieldPath {
					case "metadata.name":
						v = name
					case "metadata.namespace":
						v = testNamespace
					default:
						t.Fatalf("%s: env %s: fieldRef %s is not simulated here", s.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
					}
				} else {
					v = expand(v, vars)
				}
				vars[e.Name] = v
				env = append(env, e.Name+"="+v)
			}
			var argv []string
			for _, a := range append(slices.Clone(c.Command), c.Args...) {
				x := expand(a, vars)
				if strings.Contains(x, "$(") {
					t.Fatalf("%s: %q refers to a variable the container does not define", name, a)
				}
				argv = append(argv, x)
			}
			out = append(out, pod{name: name, set: s, container: c, argv: argv, env: env})
		}
	}
	return out
}

// expand substitutes $(NAME) from vars as the kubelet does: $$ is a literal
// $, and an undefined reference stays as it is.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) {
			if s[i+1] == '$' {
				b.WriteByte('$')
				i++
				continue
			}
			if s[i+1] == '(' {
				if j := strings.IndexByte(s[i:], ')'); j > 0 {
					if v, ok := vars[s[i+2:i+j]]; ok {
						b.WriteString(v)
						i += j
						continue
					}
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containerPort resolves a probe's or a Service's target port (a number or
// a port name) to the container's port number.
func containerPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port named %q", c.Name, p.StrVal)
	return 0
}

// serveArgs returns the `concord serve` arguments of a pod: what follows
// serve in its command line.
func serveArgs(t *testing.T, p pod) []string {
	t.Helper()
	i := slices.Index(p.argv, "serve")
	if i < 0 {
		t.Fatalf("%s: no serve in %q", p.name, p.argv)
	}
	return p.argv[i+1:]
}

// TestKubernetesManifests checks what the API server's schema does not:
// that the parts fit together.
func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t)
	if len(m.sets) != 1 || len(m.pdbs) != 1 {
		t.Fatalf("%d StatefulSets and %d PodDisruptionBudgets, want 1 and 1", len(m.sets), len(m.pdbs))
	}
	set := m.sets[0]
	if set.Spec.Replicas == nil || *set.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", set.Spec.Replicas)
	}
	if set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: with OrderedReady a full restart deadlocks (pod 0 is never ready alone)", set.Spec.PodManagementPolicy)
	}
	podLabels := labels.Set(set.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("the StatefulSet's selector does not match its pods' labels (%v)", err)
	}
	// Services: a headless one governing the set, and one for clients.
	var headless, client *corev1.Service
	for _, s := range m.services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) || len(s.Spec.Selector) == 0 {
			t.Errorf("service %s does not select the pods", s.Name)
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		} else {
			client = s
		}
	}
	if headless == nil || client == nil {
		t.Fatal("want a headless Service and a client Service")
	}
	if set.Spec.ServiceName != headless.Name {
		t.Errorf("serviceName %q, want the headless Service %q", set.Spec.ServiceName, headless.Name)
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service %s: publishNotReadyAddresses must be true, or peers cannot find each other before a leader exists", headless.Name)
	}
	// The PDB covers the pods and lets one go at a time.
	pdb := m.pdbs[0]
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !pdbSel.Matches(podLabels) || pdbSel.Empty() {
		t.Errorf("PodDisruptionBudget %s does not select the pods (%v)", pdb.Name, err)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v, minAvailable %v; want maxUnavailable 1", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}

	pods := m.pods(t)
	c := set.Spec.Template.Spec.Containers[0]
	args := serveArgs(t, pods[0])
	port := func(flag string) int {
		v, ok := flagValue(args, flag)
		if !ok {
			t.Fatalf("no --%s", flag)
		}
		return portOf(t, v)
	}
	// Probes: /readyz and /healthz on the port --metrics-listen serves.
	metricsPort := port("metrics-listen")
	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe}
	wantPath := map[string]string{"readiness": "/readyz", "liveness": "/healthz", "startup": "/healthz"}
	for kind, pr := range probes {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", kind)
			continue
		}
		if pr.HTTPGet.Path != wantPath[kind] || containerPort(t, c, pr.HTTPGet.Port) != metricsPort {
			t.Errorf("%s probe GET %s on port %d, want %s on %d (--metrics-listen)", kind, pr.HTTPGet.Path, containerPort(t, c, pr.HTTPGet.Port), wantPath[kind], metricsPort)
		}
	}
	// Service ports lead to the listeners.
	for _, sp := range client.Spec.Ports {
		if containerPort(t, c, sp.TargetPort) != port("nats-listen") {
			t.Errorf("client Service port %s leads to %s, not to --nats-listen", sp.Name, sp.TargetPort.String())
		}
	}
	var peerPorts []int
	for _, sp := range headless.Spec.Ports {
		peerPorts = append(peerPorts, containerPort(t, c, sp.TargetPort))
	}
	for _, flag := range []string{"nats-cluster", "raft-addr"} {
		if !slices.Contains(peerPorts, port(flag)) {
			t.Errorf("headless Service has no port for --%s (%d)", flag, port(flag))
		}
		if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return int(cp.ContainerPort) == port(flag) }) {
			t.Errorf("container declares no port for --%s", flag)
		}
	}
	// Security.
	psc, sc := set.Spec.Template.Spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.FSGroup == nil:
		t.Error("pod securityContext: want runAsNonRoot and an fsGroup (so the volume is writable)")
	case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("container securityContext: want runAsNonRoot")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("container securityContext: want readOnlyRootFilesystem")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("container securityContext: want allowPrivilegeEscalation false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("container securityContext: want capabilities drop [ALL], add none")
	}
	// Data on the claim template's volume.
	dataDir, _ := flagValue(args, "data-dir")
	var onClaim bool
	for _, vm := range c.VolumeMounts {
		for _, vct := range set.Spec.VolumeClaimTemplates {
			onClaim = onClaim || (vm.Name == vct.Name && vm.MountPath == dataDir)
		}
	}
	if !onClaim {
		t.Errorf("--data-dir %s is not a volumeClaimTemplates mount", dataDir)
	}

	// Per pod: node id, Raft address and routes from the pod's names.
	for _, p := range pods {
		a := serveArgs(t, p)
		if id, _ := flagValue(a, "node-id"); id != p.name {
			t.Errorf("%s: --node-id %q, want the pod name", p.name, id)
		}
		wantRaft := fmt.Sprintf("%s.%s.%s.svc.cluster.local:%d", p.name, headless.Name, testNamespace, port("raft-addr"))
		if raft, _ := flagValue(a, "raft-addr"); raft != wantRaft {
			t.Errorf("%s: --raft-addr %q, want %q, the pod's own DNS name", p.name, raft, wantRaft)
		}
		routes, _ := flagValue(a, "nats-routes")
		for _, q := range pods {
			want := fmt.Sprintf("nats://%s.%s:%d", q.name, headless.Name, port("nats-cluster"))
			if !slices.Contains(strings.Split(routes, ","), want) {
				t.Errorf("%s: --nats-routes lacks %s", p.name, want)
			}
		}
		if errs := validation.IsDNS1123Label(p.name); len(errs) > 0 {
			t.Errorf("pod name %q: %v", p.name, errs)
		}
		if hasFlag(a, "bootstrap") || hasFlag(a, "join") {
			t.Errorf("%s: --bootstrap/--join are podstart's to add, by ordinal", p.name)
		}
		if len(p.argv) == 0 || p.argv[0] != "/podstart" {
			t.Errorf("%s: command %q, want /podstart (it picks --bootstrap or --join)", p.name, p.argv)
		}
	}
}

// TestKubernetesCluster starts the StatefulSet's pods as local processes:
// /podstart (built from deploy/podstart) with the pod's expanded arguments
// and environment, executing the concord binary; pod DNS names map to free
// loopback ports. They must form one 3-node cluster that serves.
func TestKubernetesCluster(t *testing.T) {
	m := loadManifests(t)
	pods := m.pods(t)
	svc := m.sets[0].Spec.ServiceName
	l := newLocalizer(t)
	for _, p := range pods {
		l.addHost(p.name, p.name+"."+svc, p.name+"."+svc+"."+testNamespace+".svc.cluster.local")
	}
	var procs []*proc
	var ids, urls, metrics []string
	for _, p := range pods {
		a := serveArgs(t, p)
		dataDir, _ := flagValue(a, "data-dir")
		argv := l.args(p.name, p.argv, dataDir, filepath.Join(t.TempDir(), "data"))
		if argv[0] != "/podstart" {
			t.Fatalf("%s: command %q, want /podstart", p.name, argv)
		}
		argv[0] = podstartBin
		env := append(slices.Clone(p.env), "CONCORD_BIN="+concordBin)
		procs = append(procs, start(t, p.name, argv, env...))
		ids = append(ids, p.name)
		listen, _ := flagValue(a, "nats-listen")
		urls = append(urls, "nats://"+l.local(p.name, portOf(t, listen)))
		ml, _ := flagValue(a, "metrics-listen")
		metrics = append(metrics, l.local(p.name, portOf(t, ml)))
	}
	checkCluster(t, procs, ids, urls, metrics)
	// podstart said which mode it chose; concord-0 alone bootstrapped.
	for _, p := range procs {
		b, _ := os.ReadFile(p.log)
		want := "--join\n"
		if strings.HasSuffix(p.name, "-0") {
			want = "--bootstrap\n"
		}
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: podstart did not run concord with %s", p.name, strings.TrimSpace(want))
		}
	}
}
