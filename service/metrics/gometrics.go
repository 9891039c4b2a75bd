package metrics

import (
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// goMetricsSink carries hashicorp/raft's go-metrics measurements into
// Prometheus, as raft_* series named like go-metrics' own Prometheus sink
// names them (key parts joined by '_'; samples as summaries, counters,
// gauges). It exists for speed: raft reports a counter on every Apply and
// samples on every batch, and go-metrics' sink joins the key, hashes the
// labels and rewrites a sync.Map entry on each call, which came to 4.5% of a
// node's CPU under keep-alive load. Here a key of up to four parts without
// labels is found in a map without allocating; anything else takes the
// slower path. Series live as long as the process: raft's set is small,
// and the peer-labelled ones grow by one per member ever replicated to.
type goMetricsSink struct {
	mu      sync.RWMutex
	entries map[sinkKey]*sinkEntry
}

// sinkKey identifies a series: its kind and key parts, or, for longer keys
// and labelled series, the flattened name and labels in long.
type sinkKey struct {
	kind  sinkKind
	parts [4]string
	long  string
}

type sinkKind uint8

const (
	sinkCounter sinkKind = iota
	sinkGauge
	sinkSummary
)

// sinkEntry is one series; exactly one field is set.
type sinkEntry struct {
	counter prometheus.Counter
	gauge   prometheus.Gauge
	summary prometheus.Summary
}

func (e *sinkEntry) collector() prometheus.Collector {
	switch {
	case e.counter != nil:
		return e.counter
	case e.gauge != nil:
		return e.gauge
	}
	return e.summary
}

var _ gometrics.MetricSink = (*goMetricsSink)(nil)
var _ gometrics.PrecisionGaugeMetricSink = (*goMetricsSink)(nil)
var _ prometheus.Collector = (*goMetricsSink)(nil)

func newGoMetricsSink() *goMetricsSink {
	return &goMetricsSink{entries: map[sinkKey]*sinkEntry{}}
}

// keyFor returns the map key of a series.
func keyFor(kind sinkKind, parts []string, labels []gometrics.Label) sinkKey {
	k := sinkKey{kind: kind}
	if len(parts) <= len(k.parts) && len(labels) == 0 {
		copy(k.parts[:], parts)
		return k
	}
	name := flattenMetricName(parts)
	var b strings.Builder
	b.WriteString(name)
	for _, l := range labels {
		b.WriteString(";" + l.Name + "=" + l.Value)
	}
	k.long = b.String()
	return k
}

// metricNameReplacer turns go-metrics key parts into a Prometheus name, as
// go-metrics' own Prometheus sink does.
var metricNameReplacer = strings.NewReplacer(" ", "_", ".", "_", "=", "_", "-", "_", "/", "_")

func flattenMetricName(parts []string) string {
	return metricNameReplacer.Replace(strings.Join(parts, "_"))
}

// entry returns the series for the key, making it on first use.
func (s *goMetricsSink) entry(kind sinkKind, parts []string, labels []gometrics.Label) *sinkEntry {
	k := keyFor(kind, parts, labels)
	s.mu.RLock()
	e := s.entries[k]
	s.mu.RUnlock()
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[k]; e != nil {
		return e
	}
	name := flattenMetricName(parts)
	var constLabels prometheus.Labels
	if len(labels) > 0 {
		constLabels = prometheus.Labels{}
		for _, l := range labels {
			constLabels[l.Name] = l.Value
		}
	}
	e = &sinkEntry{}
	switch kind {
	case sinkCounter:
		e.counter = prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: name, ConstLabels: constLabels})
	case sinkGauge:
		e.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: name, ConstLabels: constLabels})
	default:
		e.summary = prometheus.NewSummary(prometheus.SummaryOpts{Name: name, Help: name, ConstLabels: constLabels,
			MaxAge: summaryMaxAge, Objectives: map[float64]float64{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}})
	}
	s.entries[k] = e
	return e
}

// summaryMaxAge is the window of the raft_* summaries' quantiles, as in
// go-metrics' Prometheus sink.
const summaryMaxAge = 10 * time.Second

// SetGauge implements gometrics.MetricSink.
func (s *goMetricsSink) SetGauge(key []string, val float32) {
	s.entry(sinkGauge, key, nil).gauge.Set(float64(val))
}

// SetGaugeWithLabels implements gometrics.MetricSink.
func (s *goMetricsSink) SetGaugeWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.entry(sinkGauge, key, labels).gauge.Set(float64(val))
}

// SetPrecisionGauge implements gometrics.PrecisionGaugeMetricSink.
func (s *goMetricsSink) SetPrecisionGauge(key []string, val float64) {
	s.entry(sinkGauge, key, nil).gauge.Set(val)
}

// SetPrecisionGaugeWithLabels implements gometrics.PrecisionGaugeMetricSink.
func (s *goMetricsSink) SetPrecisionGaugeWithLabels(key []string, val float64, labels []gometrics.Label) {
	s.entry(sinkGauge, key, labels).gauge.Set(val)
}

// EmitKey implements gometrics.MetricSink; Prometheus has no such thing.
func (s *goMetricsSink) EmitKey([]string, float32) {}

// IncrCounter implements gometrics.MetricSink.
func (s *goMetricsSink) IncrCounter(key []string, val float32) {
	s.IncrCounterWithLabels(key, val, nil)
}

// IncrCounterWithLabels implements gometrics.MetricSink. A Prometheus
// counter only goes up, so a negative increment is dropped.
func (s *goMetricsSink) IncrCounterWithLabels(key []string, val float32, labels []gometrics.Label) {
	if val < 0 {
		return
	}
	s.entry(sinkCounter, key, labels).counter.Add(float64(val))
}

// AddSample implements gometrics.MetricSink.
func (s *goMetricsSink) AddSample(key []string, val float32) {
	s.entry(sinkSummary, key, nil).summary.Observe(float64(val))
}

// AddSampleWithLabels implements gometrics.MetricSink.
func (s *goMetricsSink) AddSampleWithLabels(key []string, val float32, labels []gometrics.Label) {
	s.entry(sinkSummary, key, labels).summary.Observe(float64(val))
}

// Describe implements prometheus.Collector: the series are not known in
// advance, so the sink is an unchecked collector.
func (s *goMetricsSink) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (s *goMetricsSink) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	entries := make([]*sinkEntry, 0, len(s.entries))
	for _, e := range s.entries {
		entries = append(entries, e)
	}
	s.mu.RUnlock()
	for _, e := range entries {
		e.collector().Collect(ch)
	}
}
