//go:build unix

package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reconfhq/reconf/internal/testkit"
	"github.com/reconfhq/reconf/propagate"
	"github.com/reconfhq/reconf/propagate/embedded"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// dir is deploy/kubernetes.
const dir = ".."

// binary is the reconfd built from the repository for this run.
var binary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "reconfd-manifests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	binary = filepath.Join(tmp, "reconfd")
	build := exec.Command("go", "build", "-o", binary, "./cmd/reconfd")
	build.Dir = filepath.Join(dir, "..", "..")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building reconfd:", err)
		return 1
	}
	return m.Run()
}

// manifests holds a variant's objects by kind and name, as the pipeline
// applies them (the ConfigMap made from config.yaml included).
type manifests struct {
	deployment *appsv1.Deployment
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	services   []*corev1.Service
	pdbs       []*policyv1.PodDisruptionBudget
	namespaces []string
}

// decodeStrict decodes one manifest into its Kubernetes type, refusing
// unknown and duplicate fields.
func decodeStrict(t *testing.T, m *manifests, file string, doc []byte) {
	t.Helper()
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var obj any
	switch meta.APIVersion + " " + meta.Kind {
	case "v1 Namespace":
		obj = &corev1.Namespace{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	default:
		t.Fatalf("%s: a manifest of kind %q %q this test does not know", file, meta.APIVersion, meta.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: %s %s does not decode strictly: %v", file, meta.APIVersion, meta.Kind, err)
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		m.namespaces = append(m.namespaces, o.Name)
	case *corev1.Secret:
		m.secrets[o.Name] = o
	case *corev1.ConfigMap:
		m.configMaps[o.Name] = o
	case *corev1.Service:
		m.services = append(m.services, o)
	case *appsv1.Deployment:
		if m.deployment != nil {
			t.Fatalf("%s: a second Deployment", file)
		}
		m.deployment = o
	case *policyv1.PodDisruptionBudget:
		m.pdbs = append(m.pdbs, o)
	}
}

func loadFiles(t *testing.T, m *manifests, files ...string) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			decodeStrict(t, m, f, []byte(doc))
		}
	}
}

// variant loads what the pipeline applies for name (single or fleet).
func variant(t *testing.T, name string) *manifests {
	t.Helper()
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	files := []string{"namespace.yaml", "secrets/single.example.yaml"}
	if name == "fleet" {
		files = append(files, "secrets/fleet.example.yaml")
	}
	entries, err := os.ReadDir(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		files = append(files, filepath.Join(name, e.Name()))
	}
	loadFiles(t, m, files...)
	// The pipeline's `kubectl create configmap --from-file=config.yaml`.
	cfg, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m.configMaps["reconfd-config"] = &corev1.ConfigMap{Data: map[string]string{"config.yaml": string(cfg)}}
	m.configMaps["reconfd-config"].Name, m.configMaps["reconfd-config"].Namespace = "reconfd-config", "reconf"
	if m.deployment == nil {
		t.Fatalf("%s: no Deployment", name)
	}
	return m
}

// TestEveryManifestDecodesStrictly decodes every YAML file under
// deploy/kubernetes (but the reconfd configuration) into its API type.
func TestEveryManifestDecodesStrictly(t *testing.T) {
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" || filepath.Base(path) == "config.yaml" {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		m.deployment = nil
		loadFiles(t, m, rel)
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 6 {
		t.Fatalf("decoded %d files; the manifests moved?", n)
	}
	// A field Kubernetes does not know is refused: the check can fail.
	bad := []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selectr: {a: b}}\n")
	if err := yaml.UnmarshalStrict(bad, &corev1.Service{}); err == nil {
		t.Fatal("strict decoding accepted an unknown field")
	}
}

// container is the Deployment's reconfd container.
func (m *manifests) container(t *testing.T) *corev1.Container {
	t.Helper()
	cs := m.deployment.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "reconfd" {
		t.Fatalf("want one container named reconfd, have %d", len(cs))
	}
	return &cs[0]
}

// flag returns the value of --name in args.
func flag(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// mountOf returns the volume that holds path in the container and the key
// inside it, or fails.
func (m *manifests) mountOf(t *testing.T, c *corev1.Container, path string) (corev1.Volume, string) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if vm.SubPath != "" {
			t.Errorf("%s is a subPath mount: Kubernetes never updates it", vm.MountPath)
		}
		for _, v := range m.deployment.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name {
				return v, rel
			}
		}
		t.Fatalf("volumeMount %s names no volume", vm.Name)
	}
	t.Fatalf("%s is under no volumeMount", path)
	return corev1.Volume{}, ""
}

// payload is what the kubelet writes into v: key -> content, and the mode.
func (m *manifests) payload(t *testing.T, v corev1.Volume) (map[string]string, os.FileMode) {
	t.Helper()
	switch {
	case v.ConfigMap != nil:
		cm, ok := m.configMaps[v.ConfigMap.Name]
		if !ok {
			t.Fatalf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
		}
		return cm.Data, 0o644
	case v.Secret != nil:
		s, ok := m.secrets[v.Secret.SecretName]
		if !ok {
			t.Fatalf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
		}
		mode := os.FileMode(0o644)
		if v.Secret.DefaultMode != nil {
			mode = os.FileMode(*v.Secret.DefaultMode)
		}
		out := map[string]string{}
		for k, b := range s.Data {
			out[k] = string(b)
		}
		for k, s := range s.StringData {
			out[k] = s
		}
		return out, mode
	case v.EmptyDir != nil:
		return nil, 0
	}
	t.Fatalf("volume %s: a kind this test does not lay out", v.Name)
	return nil, 0
}

// referencedFiles lists every file path the container reads: --config,
// ${file:} references in the configuration and the environment, and the
// environment's file variables.
var fileRef = regexp.MustCompile(`\$\{file:([^}]+)\}`)

func (m *manifests) referencedFiles(t *testing.T, c *corev1.Container) []string {
	t.Helper()
	cfgPath := flag(c.Args, "config")
	files := []string{cfgPath}
	v, key := m.mountOf(t, c, cfgPath)
	data, _ := m.payload(t, v)
	for _, r := range fileRef.FindAllStringSubmatch(data[key], -1) {
		files = append(files, r[1])
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("env %s: a value from the API is not read on reload; mount a file", e.Name)
			continue
		}
		for _, r := range fileRef.FindAllStringSubmatch(e.Value, -1) {
			files = append(files, r[1])
		}
		if strings.HasSuffix(e.Name, "_FILE") || slices.Contains([]string{"RECONF_CLUSTER_CA", "RECONF_CLUSTER_CERT", "RECONF_CLUSTER_KEY"}, e.Name) {
			files = append(files, e.Value)
		}
	}
	return files
}

func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// serverAddress reads server.address from the configuration.
func serverAddress(t *testing.T, cfg string) string {
	t.Helper()
	var c struct {
		Server struct {
			Address string `json:"address"`
		} `json:"server"`
	}
	if err := yaml.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatal(err)
	}
	return c.Server.Address
}

// probes returns the container's probes by name.
func probes(c *corev1.Container) map[string]*corev1.Probe {
	out := map[string]*corev1.Probe{}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if p != nil {
			out[name] = p
		}
	}
	return out
}

// containerPort resolves a probe's or Service's port against the
// container's named ports.
func containerPort(t *testing.T, c *corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	t.Fatalf("port %s is not a port of the container", p.String())
	return 0
}

// TestCrossReferences checks that what each Deployment names exists and
// agrees with the configuration.
func TestCrossReferences(t *testing.T) {
	for _, name := range []string{"single", "fleet"} {
		t.Run(name, func(t *testing.T) {
			m := variant(t, name)
			d := m.deployment
			spec := d.Spec.Template.Spec
			c := m.container(t)
			for k, v := range d.Spec.Selector.MatchLabels {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("the selector's %s=%s is not on the pod template", k, v)
				}
			}
			for _, o := range append([]string{d.Namespace}, namespacesOf(m)...) {
				if !slices.Contains(m.namespaces, o) {
					t.Errorf("namespace %s is not created", o)
				}
			}
			// Every mount names a volume; every file read lies in a
			// mounted ConfigMap or Secret holding that key.
			for _, vm := range c.VolumeMounts {
				m.mountOf(t, c, filepath.Join(vm.MountPath, "x"))
			}
			for _, f := range m.referencedFiles(t, c) {
				v, key := m.mountOf(t, c, f)
				data, _ := m.payload(t, v)
				if _, ok := data[key]; !ok {
					t.Errorf("%s: volume %s holds no key %q", f, v.Name, key)
				}
			}
			// Secret files readable by the process only: 0400, or 0440
			// with the pod's fsGroup.
			for _, v := range spec.Volumes {
				if v.Secret == nil {
					continue
				}
				mode := v.Secret.DefaultMode
				switch {
				case mode == nil:
					t.Errorf("secret volume %s: set defaultMode", v.Name)
				case *mode == 0o400:
				case *mode == 0o440 && spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil:
				default:
					t.Errorf("secret volume %s: defaultMode %#o; use 0400, or 0440 with fsGroup", v.Name, *mode)
				}
			}
			// Ports: the data plane's from the configuration, management's
			// from the arguments; probes and Services name them.
			cfgV, cfgKey := m.mountOf(t, c, flag(c.Args, "config"))
			data, _ := m.payload(t, cfgV)
			if got := containerPort(t, c, intstr.FromString("http")); got != port(t, serverAddress(t, data[cfgKey])) {
				t.Errorf("containerPort http is %d; server.address is %s", got, serverAddress(t, data[cfgKey]))
			}
			if got := containerPort(t, c, intstr.FromString("management")); got != port(t, flag(c.Args, "management-address")) {
				t.Errorf("containerPort management is %d; --management-address is %s", got, flag(c.Args, "management-address"))
			}
			ps := probes(c)
			if ps["readiness"] == nil || ps["liveness"] == nil {
				t.Fatal("a readiness and a liveness probe are needed")
			}
			for pname, p := range ps {
				if p.HTTPGet == nil {
					t.Errorf("%s probe: not an HTTP probe", pname)
					continue
				}
				if containerPort(t, c, p.HTTPGet.Port) != containerPort(t, c, intstr.FromString("http")) || p.HTTPGet.Path != "/healthz" {
					t.Errorf("%s probe: %s on port %s; the data plane answers /healthz (503 while draining)", pname, p.HTTPGet.Path, p.HTTPGet.Port.String())
				}
			}
			for _, s := range m.services {
				for k, v := range s.Spec.Selector {
					if d.Spec.Template.Labels[k] != v {
						t.Errorf("service %s selects %s=%s, not on the pods", s.Name, k, v)
					}
				}
				for _, p := range s.Spec.Ports {
					containerPort(t, c, p.TargetPort)
				}
			}
			for _, p := range m.pdbs {
				for k, v := range p.Spec.Selector.MatchLabels {
					if d.Spec.Template.Labels[k] != v {
						t.Errorf("PodDisruptionBudget %s selects %s=%s, not on the pods", p.Name, k, v)
					}
				}
			}
			// The drain: preStop sleep, then up to --shutdown-timeout,
			// within the grace period with room to close.
			if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
				t.Fatal("preStop: a sleep lets endpoints drop the pod before SIGTERM")
			}
			drain, err := time.ParseDuration(flag(c.Args, "shutdown-timeout"))
			if err != nil {
				t.Fatalf("--shutdown-timeout: %v", err)
			}
			pre := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			if pre+drain+5*time.Second > grace {
				t.Errorf("terminationGracePeriodSeconds %v does not cover preStop %v + drain %v + 5s", grace, pre, drain)
			}
			if name == "fleet" {
				if !strings.HasPrefix(flag(c.Args, "cluster"), "https://") || c.Env == nil {
					t.Error("the fleet reaches etcd over TLS")
				}
				env := map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				for _, k := range []string{"RECONF_CLUSTER_CA", "RECONF_CLUSTER_CERT", "RECONF_CLUSTER_KEY", "RECONF_CLUSTER_USER", "RECONF_CLUSTER_PASSWORD"} {
					if env[k] == "" {
						t.Errorf("the fleet sets no %s", k)
					}
				}
				if !fileRef.MatchString(env["RECONF_CLUSTER_PASSWORD"]) {
					t.Error("the etcd password must be a ${file:} reference")
				}
				if *d.Spec.Replicas < 2 {
					t.Error("the fleet runs several replicas")
				}
			}
		})
	}
}

func namespacesOf(m *manifests) []string {
	var out []string
	for _, s := range m.secrets {
		out = append(out, s.Namespace)
	}
	for _, s := range m.services {
		out = append(out, s.Namespace)
	}
	for _, p := range m.pdbs {
		out = append(out, p.Namespace)
	}
	return out
}

var (
	reListening = regexp.MustCompile(`msg=listening address=(\S+)`)
	reMgmt      = regexp.MustCompile(`msg="management listening" address=(\S+)`)
)

// TestSingleStartsAndAnswersProbes starts reconfd as the single
// Deployment's pod would and requests every probe (see startPod).
func TestSingleStartsAndAnswersProbes(t *testing.T) {
	startPod(t, variant(t, "single"), pod{})
}

// TestFleetStartsOnTLSEtcdWithAUser starts a fleet replica as the fleet
// Deployment's pod would, against an etcd member served over TLS with
// client certificates and authentication on: a CA, the member's and the
// client's certificates are made here, and the Deployment's etcd user is
// given a role of read-write on its --cluster-prefix and nothing else, as
// secrets/fleet.example.yaml tells the operator. The client certificate
// names no etcd user, so only the user and password can authorize the
// replica. It joins, answers every probe, and status names the cluster.
func TestFleetStartsOnTLSEtcdWithAUser(t *testing.T) {
	m := variant(t, "fleet")
	c := m.container(t)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	user, prefix := env["RECONF_CLUSTER_USER"], flag(c.Args, "cluster-prefix")
	const password = "fleet-test-etcd-password"

	pki := t.TempDir()
	ca := testkit.NewCA(t, pki)
	srvCert, srvKey := ca.Issue("etcd-member")
	cliCert, cliKey := ca.Issue("fleet-client") // no etcd user of that name
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	member, err := embedded.StartCluster(ctx, 1, embedded.Config{Logger: slog.New(slog.DiscardHandler),
		TLS: &embedded.TLSFiles{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: ca.File}})
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	ep := member.Endpoints()[0]
	enableAuth(t, ctx, ca, ep, cliCert, cliKey, user, password, prefix)

	read := func(f string) string {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The client Secret as the operator creates it from their PKI.
	secret := map[string]string{"ca.crt": read(ca.File), "tls.crt": read(cliCert), "tls.key": read(cliKey), "password": password}
	status := startPod(t, m, pod{cluster: ep, payloads: map[string]map[string]string{"etcd": secret}})
	var st struct {
		ClusterVersion *uint64 `json:"cluster_version"`
		Reachable      bool    `json:"cluster_reachable"`
	}
	if err := json.Unmarshal(status, &st); err != nil || !st.Reachable || st.ClusterVersion == nil || *st.ClusterVersion < 1 {
		t.Errorf("status of the replica does not show it in the cluster:\n%s", status)
	}
}

// enableAuth turns on etcd's authentication the way an operator does:
// root, then a role with read-write on prefix and the user holding it.
func enableAuth(t *testing.T, ctx context.Context, ca *testkit.CA, ep, certFile, keyFile, user, password, prefix string) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := propagate.ConnectWith(propagate.ClientConfig{Endpoints: []string{ep},
		TLS: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "root-"+password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, user); return err },
		func() error {
			p := strings.TrimSuffix(prefix, "/") + "/"
			_, err := cli.RoleGrantPermission(ctx, user, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, user, password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth step %d: %v", i, err)
		}
	}
}

// pod is what startPod changes from the manifests: the etcd endpoints
// for --cluster, and payloads that replace a volume's example Secret
// values (by volume name).
type pod struct {
	cluster  string
	payloads map[string]map[string]string
}

// startPod starts reconfd as the Deployment's pod would: its arguments
// and environment, each volume laid out by a fixture kubelet under a
// temporary root (paths remapped into it), the data plane and management
// on free loopback ports. Then every probe is requested, and status is
// read with the token from its Secret and returned.
func startPod(t *testing.T, m *manifests, p pod) []byte {
	t.Helper()
	c := m.container(t)
	root := t.TempDir()
	// One pass: root itself may lie under a mount path (/tmp).
	var pairs []string
	for _, vm := range c.VolumeMounts {
		pairs = append(pairs, vm.MountPath+"/", filepath.Join(root, vm.MountPath)+"/")
	}
	remap := strings.NewReplacer(pairs...).Replace
	revisions := map[string]string{}
	for _, vm := range c.VolumeMounts {
		var v corev1.Volume
		for _, x := range m.deployment.Spec.Template.Spec.Volumes {
			if x.Name == vm.Name {
				v = x
			}
		}
		data, mode := m.payload(t, v)
		if data == nil {
			continue
		}
		if over, ok := p.payloads[v.Name]; ok {
			for k := range over {
				if _, ok := data[k]; !ok {
					t.Fatalf("volume %s: the manifests hold no key %s", v.Name, k)
				}
			}
			data = over
		}
		mapped := map[string]string{}
		for k, s := range data {
			mapped[k] = remap(s)
			if k == "config.yaml" {
				mapped[k] = strings.Replace(mapped[k], serverAddress(t, s), "127.0.0.1:0", 1)
			}
		}
		k := testkit.NewKubelet(t, filepath.Join(root, vm.MountPath), mode, mapped)
		revisions[filepath.Join(root, vm.MountPath)] = k.Revision()
	}
	args := slices.Clone(c.Args)
	for i := range args {
		args[i] = remap(args[i])
		if i > 0 && args[i-1] == "--management-address" {
			args[i] = "127.0.0.1:0"
		}
		if i > 0 && args[i-1] == "--cluster" {
			if p.cluster == "" {
				t.Fatal("the manifests name a cluster; the test gives none")
			}
			args[i] = p.cluster
		}
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + root}
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+remap(e.Value))
	}
	var logs testkit.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = &logs, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("reconfd did not stop cleanly: %v", err)
			}
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("reconfd did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("reconfd output:\n%s", logs.String())
		}
	}()
	var data, mgmt string
	sc := bufio.NewScanner(pr)
	for (data == "" || mgmt == "") && sc.Scan() {
		logs.Write(append(sc.Bytes(), '\n'))
		if mm := reListening.FindStringSubmatch(sc.Text()); mm != nil {
			data = mm[1]
		}
		if mm := reMgmt.FindStringSubmatch(sc.Text()); mm != nil {
			mgmt = mm[1]
		}
	}
	go func() {
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
		}
	}()
	if data == "" || mgmt == "" {
		t.Fatalf("reconfd did not open the data plane and management")
	}
	byPort := map[int32]string{containerPort(t, c, intstr.FromString("http")): data, containerPort(t, c, intstr.FromString("management")): mgmt}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for name, p := range probes(c) {
		url := fmt.Sprintf("http://%s%s", byPort[containerPort(t, c, p.HTTPGet.Port)], p.HTTPGet.Path)
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("%s probe: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s probe %s: %d", name, url, resp.StatusCode)
		}
	}
	token := m.secrets["reconfd-management"].StringData["token"]
	req, _ := http.NewRequest("GET", "http://"+mgmt+"/admin/config/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status with the Secret's token: %d", resp.StatusCode)
	}
	cfgDir := filepath.Join(root, "etc/reconfd/config")
	if !bytes.Contains(body, []byte(revisions[cfgDir])) || bytes.Contains(body, []byte("source_subpath_mount")) {
		t.Errorf("status does not name the configuration's revision %s (or warns of a subPath):\n%s", revisions[cfgDir], body)
	}
	return body
}
