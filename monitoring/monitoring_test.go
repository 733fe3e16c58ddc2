package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const datasourceUID = "mooncake-prometheus"

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: `apt-get install prometheus` provides it (make setup)")
	}
	return p
}

func TestPromtoolCheckConfig(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "config", "prometheus/prometheus.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS: prometheus/prometheus.yml is valid") ||
		!strings.Contains(string(out), "SUCCESS: 1 rule files found") {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "prometheus/alerts.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS: 10 rules found") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

type promConfig struct {
	Global struct {
		ScrapeInterval string `yaml:"scrape_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName        string `yaml:"job_name"`
		ScrapeInterval string `yaml:"scrape_interval"`
		MetricsPath    string `yaml:"metrics_path"`
		StaticConfigs  []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestPrometheusConfigShape(t *testing.T) {
	var c promConfig
	readYAML(t, "prometheus/prometheus.yml", &c)
	jobs := map[string][]string{}
	for _, sc := range c.ScrapeConfigs {
		var targets []string
		for _, s := range sc.StaticConfigs {
			targets = append(targets, s.Targets...)
		}
		jobs[sc.JobName] = targets
		if sc.ScrapeInterval != "15s" || sc.MetricsPath != "/metrics" {
			t.Errorf("job %s: scrape_interval %q metrics_path %q, want 15s /metrics", sc.JobName, sc.ScrapeInterval, sc.MetricsPath)
		}
	}
	if !slices.Equal(jobs["mooncake-master"], []string{"host.docker.internal:9003"}) {
		t.Errorf("mooncake-master targets %v, want [host.docker.internal:9003]", jobs["mooncake-master"])
	}
	if len(jobs["mooncake-pg"]) != 8 || jobs["mooncake-pg"][0] != "host.docker.internal:9100" {
		t.Errorf("mooncake-pg targets %v, want host.docker.internal:9100..9107", jobs["mooncake-pg"])
	}
	for _, f := range c.RuleFiles {
		if _, err := os.Stat(filepath.Join("prometheus", f)); err != nil {
			t.Errorf("rule file %s: %v", f, err)
		}
	}
	// The commented multi-master example: uncommented, it must be a valid scrape config with
	// three targets and the instance relabel.
	b, _ := os.ReadFile("prometheus/prometheus.yml")
	var example []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "  # - job_name: mooncake-master") {
			in = true
		}
		if in {
			if !strings.HasPrefix(line, "  #") {
				break
			}
			example = append(example, "  "+strings.TrimPrefix(strings.TrimPrefix(line, "  #"), " "))
		}
	}
	var ex promConfig
	if err := yaml.Unmarshal([]byte("scrape_configs:\n"+strings.Join(example, "\n")), &ex); err != nil || len(ex.ScrapeConfigs) != 1 {
		t.Fatalf("multi-master example does not parse (%v): %q", err, example)
	}
	if n := len(ex.ScrapeConfigs[0].StaticConfigs[0].Targets); n != 3 || !strings.Contains(strings.Join(example, "\n"), "target_label: instance") {
		t.Errorf("multi-master example: %d targets, relabel %v", n, example)
	}
}

type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		ExtraHosts  []string          `yaml:"extra_hosts"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   []string          `yaml:"depends_on"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// hostPath maps a container path of service svc to this folder through its bind mounts.
func (c compose) hostPath(t *testing.T, svc, p string) string {
	t.Helper()
	for _, v := range c.Services[svc].Volumes {
		parts := strings.Split(v, ":")
		if !strings.HasPrefix(parts[0], "./") {
			continue
		}
		if p == parts[1] || strings.HasPrefix(p, parts[1]+"/") {
			return filepath.Join(parts[0], strings.TrimPrefix(p, parts[1]))
		}
	}
	t.Fatalf("%s: no bind mount holds %s", svc, p)
	return ""
}

func loadCompose(t *testing.T) compose {
	var c compose
	readYAML(t, "docker-compose.yml", &c)
	return c
}

func TestComposeFile(t *testing.T) {
	c := loadCompose(t)
	prom, graf := c.Services["prometheus"], c.Services["grafana"]
	if !strings.HasPrefix(prom.Image, "prom/prometheus:") || !strings.HasPrefix(graf.Image, "grafana/grafana:") {
		t.Errorf("images %q %q", prom.Image, graf.Image)
	}
	if !slices.Contains(prom.ExtraHosts, "host.docker.internal:host-gateway") {
		t.Errorf("prometheus extra_hosts %v lacks host.docker.internal:host-gateway", prom.ExtraHosts)
	}
	if !slices.Equal(prom.Ports, []string{"9090:9090"}) || !slices.Equal(graf.Ports, []string{"3000:3000"}) {
		t.Errorf("ports %v %v", prom.Ports, graf.Ports)
	}
	if graf.Environment["GF_SECURITY_ADMIN_USER"] != "admin" || graf.Environment["GF_SECURITY_ADMIN_PASSWORD"] != "admin" {
		t.Errorf("grafana credentials %v, want admin/admin", graf.Environment)
	}
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s: bind mount %s: %v", name, v, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s: named volume %s is not declared", name, src)
			}
		}
	}
	var cfg string
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			cfg = v
		}
	}
	if p := c.hostPath(t, "prometheus", cfg); p != "prometheus/prometheus.yml" {
		t.Errorf("--config.file=%s is %s here, want prometheus/prometheus.yml", cfg, p)
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	c := loadCompose(t)
	var ds struct {
		Datasources []struct {
			Name, UID, Type, URL string
			IsDefault            bool `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	readYAML(t, c.hostPath(t, "grafana", "/etc/grafana/provisioning/datasources/prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 {
		t.Fatalf("datasources %+v", ds.Datasources)
	}
	d := ds.Datasources[0]
	if d.UID != datasourceUID || d.Type != "prometheus" || !d.IsDefault || d.URL != "http://prometheus:9090" {
		t.Errorf("datasource %+v", d)
	}
	if _, ok := c.Services["prometheus"]; !ok {
		t.Error("the data source's host prometheus is not a compose service")
	}
	var prov struct {
		Providers []struct {
			Type    string
			Options struct{ Path string }
		}
	}
	readYAML(t, c.hostPath(t, "grafana", "/etc/grafana/provisioning/dashboards/dashboards.yml"), &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
		t.Fatalf("providers %+v", prov.Providers)
	}
	dir := c.hostPath(t, "grafana", prov.Providers[0].Options.Path)
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	want := []string{filepath.Join(dir, "mooncake_master.json"), filepath.Join(dir, "mooncake_pg.json")}
	if !slices.Equal(files, want) {
		t.Errorf("dashboards in the provider's folder: %v, want %v", files, want)
	}
}

var (
	varRef   = regexp.MustCompile(`\$(?:\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|([A-Za-z0-9_]+))`)
	builtins = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true, "__interval_ms": true, "__range_s": true}
)

// refs returns the variables s uses.
func refs(s string) []string {
	var out []string
	for _, m := range varRef.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func TestDashboardsStructure(t *testing.T) {
	files, _ := filepath.Glob("grafana/provisioning/dashboards/*.json")
	if len(files) != 2 {
		t.Fatalf("dashboards %v", files)
	}
	uids := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID        string  `json:"uid"`
			Title      string  `json:"title"`
			Panels     []panel `json:"panels"`
			Templating struct {
				List []struct {
					Name       string          `json:"name"`
					Type       string          `json:"type"`
					Datasource json.RawMessage `json:"datasource"`
					Definition string          `json:"definition"`
					Query      struct {
						Query string `json:"query"`
					} `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || uids[d.UID] != "" {
			t.Errorf("%s: dashboard uid %q missing or also in %s", f, d.UID, uids[d.UID])
		}
		uids[d.UID] = f
		checkDS := func(where string, raw json.RawMessage) {
			var ds struct{ Type, UID string }
			if len(raw) == 0 || json.Unmarshal(raw, &ds) != nil || ds.UID != datasourceUID || ds.Type != "prometheus" {
				t.Errorf("%s %s: datasource %s does not resolve to the provisioned %q", f, where, raw, datasourceUID)
			}
		}
		defined := map[string]bool{}
		for _, v := range d.Templating.List {
			checkDS("variable "+v.Name, v.Datasource)
			if v.Query.Query == "" || v.Query.Query != v.Definition {
				t.Errorf("%s variable %s: query %q definition %q", f, v.Name, v.Query.Query, v.Definition)
			}
			for _, r := range refs(v.Query.Query) {
				if !defined[r] {
					t.Errorf("%s variable %s uses $%s, not defined before it", f, v.Name, r)
				}
			}
			if defined[v.Name] {
				t.Errorf("%s: variable %s defined twice", f, v.Name)
			}
			defined[v.Name] = true
		}
		used := map[string]bool{}
		ids := map[int]string{}
		var all []panel
		for _, p := range d.Panels {
			all = append(append(all, p), p.Panels...)
		}
		exprs := 0
		for _, p := range all {
			if p.ID <= 0 || ids[p.ID] != "" {
				t.Errorf("%s: panel %q id %d missing or shared with %q", f, p.Title, p.ID, ids[p.ID])
			}
			ids[p.ID] = p.Title
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s panel %q: gridPos %+v outside the 24-column grid", f, p.Title, p.GridPos)
			}
			if p.Type == "row" {
				continue
			}
			checkDS("panel "+p.Title, p.Datasource)
			if len(p.Targets) == 0 {
				t.Errorf("%s panel %q has no query", f, p.Title)
			}
			refIDs := map[string]bool{}
			for _, tg := range p.Targets {
				checkDS("panel "+p.Title+" target "+tg.RefID, tg.Datasource)
				if tg.Expr == "" || tg.RefID == "" || refIDs[tg.RefID] {
					t.Errorf("%s panel %q: target %q with expr %q", f, p.Title, tg.RefID, tg.Expr)
				}
				refIDs[tg.RefID] = true
				exprs++
				for _, r := range refs(tg.Expr) {
					used[r] = true
					if !defined[r] && !builtins[r] {
						t.Errorf("%s panel %q uses $%s, which is not defined", f, p.Title, r)
					}
				}
			}
		}
		// No two panels overlap.
		for i, a := range all {
			for _, b := range all[i+1:] {
				if a.GridPos.X < b.GridPos.X+b.GridPos.W && b.GridPos.X < a.GridPos.X+a.GridPos.W &&
					a.GridPos.Y < b.GridPos.Y+b.GridPos.H && b.GridPos.Y < a.GridPos.Y+a.GridPos.H {
					t.Errorf("%s: panels %q and %q overlap", f, a.Title, b.Title)
				}
			}
		}
		for name := range defined {
			if !used[name] {
				t.Errorf("%s: variable %s is defined but no panel uses it", f, name)
			}
		}
		if exprs < 10 {
			t.Errorf("%s: only %d queries", f, exprs)
		}
	}
}
