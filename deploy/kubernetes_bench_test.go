package deploy

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tokentrace/tokentrace/internal/cli"
	"github.com/tokentrace/tokentrace/internal/process"
	"github.com/tokentrace/tokentrace/internal/workload"
)

const benchBase = "kubernetes/bench"

// kustomization is the part of kustomize's Kustomization that the bench
// base uses; decoding is strict, so a misspelt field fails here.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name string   `json:"name"`
		Envs []string `json:"envs"`
	} `json:"configMapGenerator"`
}

// benchBaseFiles reads the kustomization, decodes every resource it lists
// strictly into the Kubernetes API types, and reads its env file.
func benchBaseFiles(t *testing.T) (kustomization, manifests, map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(benchBase, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := decodeStrict(js, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || len(k.ConfigMapGenerator) != 1 {
		t.Fatalf("kustomization %+v", k)
	}
	var m manifests
	for _, r := range k.Resources {
		one := readManifests(t, filepath.Join(benchBase, r))
		m.namespaces = append(m.namespaces, one.namespaces...)
		m.jobs = append(m.jobs, one.jobs...)
		m.pvcs = append(m.pvcs, one.pvcs...)
		if len(one.configMaps)+len(one.services)+len(one.deploys)+len(one.pdbs) > 0 {
			t.Errorf("%s: objects this base does not use", r)
		}
	}
	env := map[string]string{}
	for _, e := range k.ConfigMapGenerator[0].Envs {
		f, err := os.Open(filepath.Join(benchBase, e))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
				key, v, _ := strings.Cut(l, "=")
				env[key] = v
			}
		}
		f.Close()
	}
	return k, m, env
}

// benchJobs returns the shards' Job and the report's.
func benchJobs(t *testing.T, m manifests) (shards, rep batchv1.Job) {
	t.Helper()
	if len(m.jobs) != 2 || len(m.pvcs) != 1 {
		t.Fatalf("%d Jobs and %d claims: want the shards', the report's and one results volume", len(m.jobs), len(m.pvcs))
	}
	for _, j := range m.jobs {
		if j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion {
			shards = j
		} else {
			rep = j
		}
	}
	if shards.Name == "" || rep.Name == "" {
		t.Fatal("want one Indexed Job (the shards) and one other (the report)")
	}
	return shards, rep
}

// expand replaces $(NAME) as the kubelet does in a container's args.
func expand(s string, env map[string]string) string {
	for k, v := range env {
		s = strings.ReplaceAll(s, "$("+k+")", v)
	}
	return s
}

// argValue returns --name=value of args, "" when absent.
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// parseCommand parses args (subcommand first) with tokentrace's own
// command line, as the container will.
func parseCommand(t *testing.T, args []string) {
	t.Helper()
	root := cli.NewRoot()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Fatalf("%v: not a tokentrace command: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%v: %v", args, err)
	}
}

// TestBenchShardsManifests decodes the sharded bench's kustomize base
// strictly into the Kubernetes API types and checks that it runs what
// docs/scale.md says: an Indexed Job of N pods, pod INDEX running
// `bench --shard INDEX/N` from the agreed START_AT, each writing its own
// folder to one ReadWriteMany volume, and a report Job that waits for the
// N folders and merges them; N agrees everywhere, both commands parse as
// tokentrace's, the env keys exist, and the default target is the
// gateway's Service in gateway.yaml.
func TestBenchShardsManifests(t *testing.T) {
	k, m, env := benchBaseFiles(t)
	shards, rep := benchJobs(t, m)
	s := shards.Spec
	n := int(*s.Completions)
	if s.Parallelism == nil || int(*s.Parallelism) != n || n < 2 {
		t.Errorf("completions %d, parallelism %v: every shard runs at once", n, s.Parallelism)
	}
	if s.BackoffLimit == nil || *s.BackoffLimit != 0 {
		t.Error("a failed shard must not be retried (its start instant has passed)")
	}
	pod := s.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
		t.Fatalf("restart policy %q, %d containers", pod.RestartPolicy, len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Args[0] != "bench" {
		t.Fatalf("args %v: want bench first", c.Args)
	}
	if got := argValue(c.Args, "shard"); got != fmt.Sprintf("$(JOB_COMPLETION_INDEX)/%d", n) {
		t.Errorf("--shard=%s: want $(JOB_COMPLETION_INDEX)/%d", got, n)
	}
	if argValue(c.Args, "shard-start-at") != "$(START_AT)" || argValue(c.Args, "url") != "$(TARGET_URL)" {
		t.Errorf("args %v: want --shard-start-at=$(START_AT) and --url=$(TARGET_URL)", c.Args)
	}
	mount := mountOf(t, pod, c)
	if got := argValue(c.Args, "output-dir"); got != mount+"/$(START_AT)/shard-$(JOB_COMPLETION_INDEX)" {
		t.Errorf("--output-dir=%s: want a folder per run and shard on the results volume %s", got, mount)
	}
	gen := k.ConfigMapGenerator[0].Name
	for _, key := range []string{"TARGET_URL", "START_AT"} {
		if env[key] == "" || !fromConfigMap(c.Env, key, gen) {
			t.Errorf("%s: not set in the env file, or not read from ConfigMap %s", key, gen)
		}
	}
	if !slices.Contains(m.pvcs[0].Spec.AccessModes, corev1.ReadWriteMany) {
		t.Error("the results volume is not ReadWriteMany: shards on several nodes write to it at once")
	}

	// Both commands parse as tokentrace's, with the values the pods get.
	values := map[string]string{"JOB_COMPLETION_INDEX": strconv.Itoa(n - 1),
		"START_AT": time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "TARGET_URL": env["TARGET_URL"]}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand(a, values)
	}
	parseCommand(t, args)
	if sh, err := workload.ParseShard(argValue(args, "shard")); err != nil || sh.Index != n-1 || sh.Count != n {
		t.Errorf("--shard=%s: %v", argValue(args, "shard"), err)
	}
	// Every setting is valid: against a closed port, bench gets past its
	// checks and fails only for want of a server (exit 1, not 2).
	values["TARGET_URL"] = closedURL(t)
	if code := cli.Main(expandAll(c.Args, values)); code != cli.ExitFailed {
		t.Errorf("bench with the Job's args against a closed port exits %d, want %d (no server): a setting is refused", code, cli.ExitFailed)
	}

	// The report waits for N summaries and reads the same folder.
	rp := rep.Spec.Template.Spec
	if len(rp.InitContainers) != 1 || len(rp.Containers) != 1 {
		t.Fatalf("the report Job: %d init containers, %d containers", len(rp.InitContainers), len(rp.Containers))
	}
	wait, rc := rp.InitContainers[0], rp.Containers[0]
	if v := envValue(wait.Env, "SHARDS"); v != strconv.Itoa(n) || !strings.Contains(strings.Join(wait.Command, " "), "summary.json") {
		t.Errorf("the report waits for %q summaries, want %d", v, n)
	}
	if rc.Args[0] != "report" || len(rc.Args) < 2 || rc.Args[1] != mountOf(t, rp, rc)+"/$(START_AT)" || !fromConfigMap(rc.Env, "START_AT", gen) {
		t.Errorf("report args %v: want report of the run's folder", rc.Args)
	}
	parseCommand(t, expandAll(rc.Args, values))
	for _, v := range append(pod.Volumes, rp.Volumes...) {
		if v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != m.pvcs[0].Name {
			t.Errorf("volume %s is not the results claim %s", v.Name, m.pvcs[0].Name)
		}
	}
	if c.Image != rc.Image || c.Image != gatewayImage(t) {
		t.Errorf("images %s, %s: want the project's image, as in %s", c.Image, rc.Image, gatewayManifest)
	}
	checkTargetIsGateway(t, env["TARGET_URL"], k.Namespace)
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

func expandAll(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, env)
	}
	return out
}

// mountOf returns where the container mounts the pod's results volume.
func mountOf(t *testing.T, pod corev1.PodSpec, c corev1.Container) string {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.PersistentVolumeClaim != nil {
				return vm.MountPath
			}
		}
	}
	t.Fatalf("container %s mounts no claim", c.Name)
	return ""
}

func fromConfigMap(env []corev1.EnvVar, key, name string) bool {
	for _, e := range env {
		if e.Name == key && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			r := e.ValueFrom.ConfigMapKeyRef
			return r.Name == name && r.Key == key
		}
	}
	return false
}

func envValue(env []corev1.EnvVar, key string) string {
	for _, e := range env {
		if e.Name == key {
			return e.Value
		}
	}
	return ""
}

// gatewayImage is the image gateway.yaml runs.
func gatewayImage(t *testing.T) string {
	_, c := gatewayDeployment(t, readManifests(t, gatewayManifest))
	return c.Image
}

// checkTargetIsGateway: the default target is the client Service of
// gateway.yaml, by its cluster DNS name and port.
func checkTargetIsGateway(t *testing.T, target, ns string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	for _, s := range readManifests(t, gatewayManifest).services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		for _, p := range s.Spec.Ports {
			if u.Hostname() == fmt.Sprintf("%s.%s.svc.cluster.local", s.Name, s.Namespace) && strconv.Itoa(int(p.Port)) == port && s.Namespace == ns {
				return
			}
		}
	}
	t.Errorf("TARGET_URL %s is not the gateway's Service in %s", target, gatewayManifest)
}

// TestBenchShardsKustomizeBuild renders the base with kubectl's kustomize
// (no cluster needed) and decodes the output strictly: the generated
// ConfigMap gets its hashed name and both Jobs read it by that name, and
// every object lands in the namespace.
func TestBenchShardsKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed: the kustomize build is not checked (the files are, by TestBenchShardsManifests)")
	}
	// The base's labels field needs kustomize 4.1 or later.
	ver, _ := process.Output(exec.Command(kubectl, "version", "--client"))
	_, kv, _ := strings.Cut(string(ver), "Kustomize Version: v")
	if major, err := strconv.Atoi(strings.SplitN(kv, ".", 2)[0]); err != nil || major < 5 {
		t.Skipf("kubectl's kustomize is older than v5 (%q): the build is not checked", strings.TrimSpace(string(ver)))
	}
	out, err := process.Output(exec.Command(kubectl, "kustomize", benchBase))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", benchBase, err)
	}
	m := decodeManifests(t, "kubectl kustomize "+benchBase, out)
	if len(m.configMaps) != 1 || !strings.HasPrefix(m.configMaps[0].Name, "tokentrace-bench-") {
		t.Fatalf("generated ConfigMaps %v", m.configMaps)
	}
	name := m.configMaps[0].Name
	shards, rep := benchJobs(t, m)
	for _, j := range []batchv1.Job{shards, rep} {
		ps := j.Spec.Template.Spec
		for _, c := range append(ps.InitContainers, ps.Containers...) {
			if !fromConfigMap(c.Env, "START_AT", name) {
				t.Errorf("Job %s container %s does not read START_AT from %s", j.Name, c.Name, name)
			}
		}
		if j.Namespace != "tokentrace" {
			t.Errorf("Job %s in namespace %q", j.Name, j.Namespace)
		}
	}
}
