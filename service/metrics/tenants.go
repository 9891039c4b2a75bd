package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-io/concord/fsm"
)

// Tenants' series. A label per tenant would let a bus with thousands of
// accounts grow /metrics without bound, so the first tenants this process
// meets (at most the bound) get a label of their own, for the life of the
// process, and the rest share the label OtherTenant. First met rather
// than first by name: a counter never moves from one label to another.
// The default tenant, Concord's own account, is DefaultTenantLabel.

// OtherTenant labels the series of every tenant past the bound.
const OtherTenant = "other"

// DefaultTenantLabel labels the default tenant's series: the empty name
// would read as no label at all.
const DefaultTenantLabel = "-"

// TenantLabels hands out the tenant label values.
type TenantLabels struct {
	mu    sync.Mutex
	max   int
	names map[string]bool
}

// NewTenantLabels returns labels for at most max tenants besides the
// default one (0: none; all are OtherTenant).
func NewTenantLabels(max int) *TenantLabels {
	return &TenantLabels{max: max, names: map[string]bool{}}
}

// Label returns the label value of tenant's series.
func (l *TenantLabels) Label(tenant string) string {
	if tenant == fsm.DefaultTenant {
		return DefaultTenantLabel
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names[tenant] {
		return tenant
	}
	if len(l.names) < l.max && tenant != OtherTenant && tenant != DefaultTenantLabel {
		l.names[tenant] = true
		return tenant
	}
	return OtherTenant
}

var (
	descTenantKeys    = prometheus.NewDesc("concord_tenant_keys", "Keys a tenant holds (tenant \"-\" is Concord's own account; \"other\" sums the tenants past --metrics-tenants).", []string{"tenant"}, nil)
	descTenantLeases  = prometheus.NewDesc("concord_tenant_leases", "Leases a tenant holds, anonymous ones included.", []string{"tenant"}, nil)
	descTenantBytes   = prometheus.NewDesc("concord_tenant_value_bytes", "Bytes of a tenant's values and their metadata (what its value_bytes quota bounds).", []string{"tenant"}, nil)
	descTenantHistory = prometheus.NewDesc("concord_tenant_history_changes", "Changes a tenant's key history holds above its floor.", []string{"tenant"}, nil)
	descTenantQuota   = prometheus.NewDesc("concord_tenant_quota", "The quota a tenant is held to, by kind (leases, keys, value_bytes, keepalive_many, requests_per_second); absent when it is 0, no bound. Not summed into \"other\".", []string{"tenant", "kind"}, nil)
)

// tenantSums is what the tenants sharing one label hold together.
type tenantSums struct {
	keys, leases, bytes, history int64
}

// collectTenants reads every tenant's use from st and sends one series per
// label.
func collectTenants(st *fsm.State, labels *TenantLabels, ch chan<- prometheus.Metric) {
	sums := map[string]*tenantSums{}
	var order []string
	for _, u := range st.Usages() {
		t := u.Tenant
		label := labels.Label(t)
		s := sums[label]
		if s == nil {
			s = &tenantSums{}
			sums[label] = s
			order = append(order, label)
		}
		s.keys += u.Keys
		s.leases += u.Leases + u.AnonymousLeases
		s.bytes += u.ValueBytes
		s.history += u.HistoryChanges
		if label != OtherTenant && t != fsm.DefaultTenant {
			q := u.Quota
			for _, kv := range []struct {
				kind string
				v    int64
			}{{"leases", q.Leases}, {"keys", q.Keys}, {"value_bytes", q.ValueBytes}, {"keepalive_many", q.KeepAliveMany}, {"requests_per_second", q.RequestsPerSecond}} {
				if kv.v > 0 {
					ch <- prometheus.MustNewConstMetric(descTenantQuota, prometheus.GaugeValue, float64(kv.v), label, kv.kind)
				}
			}
		}
	}
	for _, label := range order {
		s := sums[label]
		for _, g := range []struct {
			d *prometheus.Desc
			v int64
		}{{descTenantKeys, s.keys}, {descTenantLeases, s.leases}, {descTenantBytes, s.bytes}, {descTenantHistory, s.history}} {
			ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.v), label)
		}
	}
}
