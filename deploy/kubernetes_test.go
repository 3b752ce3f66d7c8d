package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/tokentrace/tokentrace/internal/gateway"
)

const (
	gatewayManifest = "kubernetes/gateway.yaml"
	dockerfile      = "container/Dockerfile"
)

// manifests holds the decoded objects of one manifest file.
type manifests struct {
	namespaces []corev1.Namespace
	configMaps []corev1.ConfigMap
	services   []corev1.Service
	deploys    []appsv1.Deployment
	pdbs       []policyv1.PodDisruptionBudget
	jobs       []batchv1.Job
	pvcs       []corev1.PersistentVolumeClaim
}

// decodeStrict decodes one document's JSON into v, failing on a field the
// Kubernetes type does not have (what the API server's strict field
// validation refuses) and on trailing data.
func decodeStrict(doc []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the object")
	}
	return nil
}

// decodeAppend decodes one object strictly and appends it to list.
func decodeAppend[T any](doc []byte, list *[]T) error {
	var o T
	err := decodeStrict(doc, &o)
	*list = append(*list, o)
	return err
}

// readManifests splits path into its YAML documents, converts each to
// JSON (duplicate keys are errors) and decodes it strictly into the
// k8s.io/api type its apiVersion and kind name; an unknown kind fails.
func readManifests(t *testing.T, path string) manifests {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeManifests(t, path, raw)
}

// decodeManifests is readManifests on a manifest's text; path names it in
// errors.
func decodeManifests(t *testing.T, path string, raw []byte) manifests {
	t.Helper()
	var m manifests
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := json.Unmarshal(js, &tm); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		where := fmt.Sprintf("%s document %d (%s %s)", path, i, tm.APIVersion, tm.Kind)
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			err = decodeAppend(js, &m.namespaces)
		case "v1 ConfigMap":
			err = decodeAppend(js, &m.configMaps)
		case "v1 Service":
			err = decodeAppend(js, &m.services)
		case "apps/v1 Deployment":
			err = decodeAppend(js, &m.deploys)
		case "policy/v1 PodDisruptionBudget":
			err = decodeAppend(js, &m.pdbs)
		case "batch/v1 Job":
			err = decodeAppend(js, &m.jobs)
		case "v1 PersistentVolumeClaim":
			err = decodeAppend(js, &m.pvcs)
		default:
			t.Fatalf("%s: a kind this test does not decode", where)
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
	}
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// gatewayDeployment returns the manifest's one Deployment and its gateway
// container.
func gatewayDeployment(t *testing.T, m manifests) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	if len(m.deploys) != 1 || len(m.deploys[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Deployment with one container, got %d Deployments", len(m.deploys))
	}
	d := m.deploys[0]
	return d, d.Spec.Template.Spec.Containers[0]
}

// flagValue returns the value of --name=value in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	t.Fatalf("args %v: no --%s=", args, name)
	return ""
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetesManifests decodes the gateway's manifests strictly into
// the Kubernetes API types (no cluster is needed) and checks that the
// objects fit together and with the gateway: the ConfigMap's gateway.yaml
// is a valid gateway configuration, readiness is on /health and liveness
// is not (a draining gateway answers /health 503), the termination grace
// covers --drain-delay + --grace, resources are requested, the pod runs as
// the image's non-root user, the Services and the budget select the pods
// and reach a named port, and the headless Service is the DNS name that
// prometheus-kubernetes.yml scrapes.
func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t, gatewayManifest)
	d, c := gatewayDeployment(t, m)
	pod := d.Spec.Template
	if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector, pod.Labels)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v: want at least 2 behind the Service", d.Spec.Replicas)
	}
	if len(c.Args) == 0 || c.Args[0] != "gateway" {
		t.Errorf("args %v: want the gateway subcommand first", c.Args)
	}

	// The configuration file the container reads is the ConfigMap's.
	cfgPath := flagValue(t, c.Args, "config")
	var cfgText string
	for _, vm := range c.VolumeMounts {
		if strings.HasPrefix(cfgPath, vm.MountPath+"/") {
			for _, v := range pod.Spec.Volumes {
				if v.Name == vm.Name && v.ConfigMap != nil {
					for _, cm := range m.configMaps {
						if cm.Name == v.ConfigMap.Name {
							cfgText = cm.Data[strings.TrimPrefix(cfgPath, vm.MountPath+"/")]
						}
					}
				}
			}
		}
	}
	if cfgText == "" {
		t.Fatalf("--config=%s is not a key of a ConfigMap mounted in the pod", cfgPath)
	}
	if _, err := gateway.ParseConfig([]byte(cfgText)); err != nil {
		t.Errorf("the ConfigMap's gateway configuration is invalid: %v", err)
	}

	port := map[string]int32{}
	for _, p := range c.Ports {
		port[p.Name] = p.ContainerPort
	}
	addr := flagValue(t, c.Args, "addr")
	if !strings.HasPrefix(addr, "0.0.0.0:") || addr != fmt.Sprintf("0.0.0.0:%d", port["http"]) {
		t.Errorf("--addr=%s: want all interfaces on the http port %d", addr, port["http"])
	}
	rp, lp := c.ReadinessProbe, c.LivenessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/health" || port[rp.HTTPGet.Port.String()] == 0 {
		t.Errorf("readiness probe %+v: want GET /health on a named container port", rp)
	}
	if lp != nil && lp.HTTPGet != nil && lp.HTTPGet.Path == "/health" {
		t.Error("liveness on /health would restart a draining gateway (it answers 503)")
	}

	delay, err := time.ParseDuration(flagValue(t, c.Args, "drain-delay"))
	if err != nil {
		t.Fatal(err)
	}
	grace, err := time.ParseDuration(flagValue(t, c.Args, "grace"))
	if err != nil {
		t.Fatal(err)
	}
	tg := pod.Spec.TerminationGracePeriodSeconds
	if tg == nil || time.Duration(*tg)*time.Second < delay+grace+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v: want at least --drain-delay %s + --grace %s + 5 s", tg, delay, grace)
	}
	if delay < time.Duration(rp.PeriodSeconds*rp.FailureThreshold)*time.Second {
		t.Errorf("--drain-delay %s is shorter than the readiness probe needs to see the 503 (%d × %d s)", delay, rp.PeriodSeconds, rp.FailureThreshold)
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit (GOMEMLIMIT is derived from it)")
	}
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil {
		t.Fatalf("pod security context %+v: want runAsNonRoot with a runAsUser", psc)
	}
	if user := dockerfileUser(t); strconv.FormatInt(*psc.RunAsUser, 10) != user {
		t.Errorf("runAsUser %d, the image's USER is %s", *psc.RunAsUser, user)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v: want no privilege escalation and a read-only root", sc)
	}
	if a := pod.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(int(port["http"])) {
		t.Errorf("scrape annotations %v do not name the http port", a)
	}

	var headless string
	if len(m.services) < 2 {
		t.Fatalf("%d Services: want the clients' and the headless one", len(m.services))
	}
	for _, s := range m.services {
		if !selects(s.Spec.Selector, pod.Labels) {
			t.Errorf("Service %s selects %v, not the gateway pods %v", s.Name, s.Spec.Selector, pod.Labels)
		}
		for _, p := range s.Spec.Ports {
			if port[p.TargetPort.String()] == 0 {
				t.Errorf("Service %s port %s targets %q, not a named container port", s.Name, p.Name, p.TargetPort.String())
			}
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			if !s.Spec.PublishNotReadyAddresses {
				t.Errorf("headless Service %s hides draining pods from Prometheus", s.Name)
			}
			headless = fmt.Sprintf("%s.%s.svc.cluster.local", s.Name, s.Namespace)
		}
	}
	k8sProm, err := os.ReadFile(promK8sConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if headless == "" || !strings.Contains(string(k8sProm), "names: ["+headless+"]") {
		t.Errorf("%s does not scrape the headless Service %q", promK8sConfigFile, headless)
	}
	if len(m.pdbs) != 1 || m.pdbs[0].Spec.Selector == nil || !selects(m.pdbs[0].Spec.Selector.MatchLabels, pod.Labels) {
		t.Error("want one PodDisruptionBudget selecting the gateway pods")
	}
	ns := []string{}
	for _, n := range m.namespaces {
		ns = append(ns, n.Name)
	}
	for _, o := range []string{d.Namespace, m.configMaps[0].Namespace, m.services[0].Namespace} {
		if !slices.Contains(ns, o) {
			t.Errorf("namespace %q is not created by the manifest (%v)", o, ns)
		}
	}
}

// TestKubernetesDecodingIsStrict shows that the decoding refuses what the
// API server would: a misspelt field and a value of the wrong type.
func TestKubernetesDecodingIsStrict(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 2\n",
		"apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: two\n",
		"apiVersion: v1\nkind: Service\nspec:\n  ports: [{port: 80, targetPort: {}}]\n",
	} {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		var s corev1.Service
		var target any = &d
		if strings.Contains(doc, "Service") {
			target = &s
		}
		if err := decodeStrict(js, target); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
}

// dockerfileUser returns the final stage's USER of the Dockerfile.
func dockerfileUser(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for _, l := range strings.Split(string(raw), "\n") {
		if u, ok := strings.CutPrefix(strings.TrimSpace(l), "USER "); ok {
			user, _, _ = strings.Cut(strings.TrimSpace(u), ":")
		}
	}
	if user == "" {
		t.Fatalf("%s sets no USER", dockerfile)
	}
	return user
}
