package main

import (
	"bufio"
	"bytes"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"listwatch.local/listwatch"
)

// registerMetrics adds listwatch's metrics (its own /metrics, read at each scrape) to
// kube-apiserver's /metrics, every family named listwatch_*.
func registerMetrics(lw *listwatch.ListWatch) {
	legacyregistry.RawMustRegister(&collector{lw: lw})
}

// collector is an unchecked Prometheus collector (it describes nothing up front: the
// families are listwatch's, whatever they are at the scrape).
type collector struct {
	lw     *listwatch.ListWatch
	warned bool
}

func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	text, err := c.lw.Metrics()
	if err == nil {
		var families map[string]*dto.MetricFamily
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err = parser.TextToMetricFamilies(bytes.NewReader(classicText(text)))
		for name, f := range families {
			// listwatch names some families as kube-apiserver does (apiserver_request_total,
			// process_resident_memory_bytes): beside kube-apiserver's own they are listwatch_'s.
			if !strings.HasPrefix(name, "listwatch_") {
				name = "listwatch_" + name
			}
			desc := prometheus.NewDesc(name, f.GetHelp(), nil, nil)
			for _, m := range f.Metric {
				ch <- metric{desc: desc, m: m}
			}
		}
	}
	if err != nil && !c.warned {
		c.warned = true
		klog.Warningf("listwatch: metrics not added to /metrics: %v", err)
	}
}

// classicText turns listwatch's OpenMetrics text into Prometheus' classic text format: a
// counter family is named with its samples' _total suffix; # EOF and # UNIT are comments.
func classicText(text []byte) []byte {
	counters := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && f[3] == "counter" {
			counters[f[2]] = true
		}
	}
	var out bytes.Buffer
	sc = bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && (f[1] == "TYPE" || f[1] == "HELP") &&
			counters[f[2]] && !strings.HasSuffix(f[2], "_total") {
			line = strings.Replace(line, f[2], f[2]+"_total", 1)
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// metric is one parsed sample set, written back as it was parsed.
type metric struct {
	desc *prometheus.Desc
	m    *dto.Metric
}

func (m metric) Desc() *prometheus.Desc { return m.desc }

func (m metric) Write(out *dto.Metric) error {
	out.Label = m.m.Label
	out.Gauge, out.Counter, out.Untyped = m.m.Gauge, m.m.Counter, m.m.Untyped
	out.Summary, out.Histogram = m.m.Summary, m.m.Histogram
	return nil
}
