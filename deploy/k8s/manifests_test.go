// Package k8s_test checks the Kubernetes manifests in this directory: each
// document decodes strictly (unknown or duplicate fields fail) into its
// k8s.io/api type, the objects agree with each other (selectors, service
// names, port names, replicas and --bootstrap-expect), and the container's
// flags, ports and probes agree with the cohortd binary and the image.
package k8s_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded objects of every *.yaml file here.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
}

func load(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests found: %v", err)
	}
	var m manifests
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocuments(data) {
			where := fmt.Sprintf("%s document %d", f, i+1)
			var u unstructured.Unstructured
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var obj any
			switch gvk := u.GroupVersionKind(); gvk.GroupVersion().String() + "/" + gvk.Kind {
			case "apps/v1/StatefulSet":
				o := &appsv1.StatefulSet{}
				m.statefulSets, obj = append(m.statefulSets, o), o
			case "v1/Service":
				o := &corev1.Service{}
				m.services, obj = append(m.services, o), o
			case "policy/v1/PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				m.pdbs, obj = append(m.pdbs, o), o
			default:
				t.Fatalf("%s: unexpected kind %s: add it to this test", where, gvk)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: strict decode: %v", where, err)
			}
		}
	}
	return m
}

// splitDocuments splits a multi-document YAML file on `---` lines, dropping
// documents that hold only comments.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		for _, line := range strings.Split(cur.String(), "\n") {
			if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
				docs = append(docs, bytes.Clone(cur.Bytes()))
				break
			}
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if strings.TrimRight(sc.Text(), " ") == "---" {
			flush()
			continue
		}
		cur.WriteString(sc.Text() + "\n")
	}
	flush()
	return docs
}

func (m manifests) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no Service %q", name)
	return nil
}

func TestManifests_DecodeStrictlyAndAgree(t *testing.T) {
	m := load(t)
	if len(m.statefulSets) != 1 || len(m.pdbs) != 1 || len(m.services) != 2 {
		t.Fatalf("want 1 StatefulSet, 2 Services, 1 PodDisruptionBudget; have %d, %d, %d", len(m.statefulSets), len(m.services), len(m.pdbs))
	}
	sts := m.statefulSets[0]
	spec := sts.Spec
	if spec.Replicas == nil || *spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", spec.Replicas)
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel (formation needs every pod started)", spec.PodManagementPolicy)
	}
	podLabels := spec.Template.Labels
	if !matches(spec.Selector.MatchLabels, podLabels) {
		t.Errorf("StatefulSet selector %v does not match pod labels %v", spec.Selector.MatchLabels, podLabels)
	}

	peers := m.service(t, spec.ServiceName)
	if peers.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s (serviceName): clusterIP %q, want None (headless)", peers.Name, peers.Spec.ClusterIP)
	}
	if !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: publishNotReadyAddresses must be true, or pods cannot find each other before the cluster forms", peers.Name)
	}
	for _, s := range m.services {
		if !matches(s.Spec.Selector, podLabels) {
			t.Errorf("Service %s selector %v does not match pod labels %v", s.Name, s.Spec.Selector, podLabels)
		}
	}
	pdb := m.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v minAvailable %v, want maxUnavailable 1 only", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	if pdb.Spec.Selector == nil || !matches(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not match pod labels %v", pdb.Spec.Selector, podLabels)
	}

	pod := spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	args := parseArgs(t, c.Args)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}

	// Listen addresses, advertised addresses and container ports agree.
	for flag, portName := range map[string]string{"raft-addr": "raft", "grpc-addr": "grpc", "http-addr": "http"} {
		if got, want := portOf(t, args, flag), ports[portName]; got != want || want == 0 {
			t.Errorf("--%s port %d, container port %q %d", flag, got, portName, want)
		}
	}
	if portOf(t, args, "raft-advertise") != ports["raft"] || portOf(t, args, "grpc-advertise") != ports["grpc"] {
		t.Errorf("advertised ports %d/%d differ from the raft/grpc container ports %v", portOf(t, args, "raft-advertise"), portOf(t, args, "grpc-advertise"), ports)
	}
	if want := "$(POD_NAME)." + peers.Name + "."; !strings.HasPrefix(args["grpc-advertise"], want) {
		t.Errorf("--grpc-advertise %q: want the pod's own name under the headless service (%s...)", args["grpc-advertise"], want)
	}

	// Formation: every replica, found through the headless service.
	if args["bootstrap-expect"] != strconv.Itoa(int(*spec.Replicas)) {
		t.Errorf("--bootstrap-expect %q, replicas %d", args["bootstrap-expect"], *spec.Replicas)
	}
	if !strings.HasPrefix(args["join"], peers.Name+".") || portOf(t, args, "join") != ports["grpc"] {
		t.Errorf("--join %q: want %s.<namespace>...:%d", args["join"], peers.Name, ports["grpc"])
	}
	if args["node-id"] != "$(POD_NAME)" {
		t.Errorf("--node-id %q: want $(POD_NAME), stable across restarts", args["node-id"])
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, a := range c.Args {
		for _, ref := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(a, -1) {
			if !env[ref[1]] {
				t.Errorf("argument %q refers to $(%s), which the container does not define", a, ref[1])
			}
		}
	}

	// Data directory on the claim template's volume.
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm.Name
	}
	claim := mounts[args["data-dir"]]
	if claim == "" {
		t.Errorf("--data-dir %q is not a volume mount (%v)", args["data-dir"], mounts)
	}
	found := false
	for _, vct := range spec.VolumeClaimTemplates {
		found = found || vct.Name == claim
	}
	if !found {
		t.Errorf("volume %q for the data dir is not a volumeClaimTemplate", claim)
	}

	// Probes on the HTTP port, on cohortd's paths.
	for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		want := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[name]
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET of %s", name, want)
			continue
		}
		if probe.HTTPGet.Path != want || !samePort(probe.HTTPGet.Port, "http", ports) {
			t.Errorf("%s probe: GET %s on port %s, want %s on the http port", name, probe.HTTPGet.Path, probe.HTTPGet.Port.String(), want)
		}
	}

	// Service ports point at container ports.
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if !samePort(p.TargetPort, p.Name, ports) || p.Port != ports[p.Name] {
				t.Errorf("Service %s port %s: port %d targetPort %s, container port %q is %d", s.Name, p.Name, p.Port, p.TargetPort.String(), p.Name, ports[p.Name])
			}
		}
	}

	// Non-root, read-only root filesystem, no privilege escalation.
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 || psc.FSGroup == nil {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, a non-zero runAsUser and an fsGroup (the volume must be writable)", psc)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem and no privilege escalation", csc)
	}
	if psc != nil && psc.RunAsUser != nil && *psc.RunAsUser != imageUID(t) {
		t.Errorf("runAsUser %d differs from the image's USER %d", *psc.RunAsUser, imageUID(t))
	}

	// The container ports are the image's.
	exposed := imageExposed(t)
	for name, p := range ports {
		if !exposed[p] {
			t.Errorf("container port %s %d is not EXPOSEd by deploy/docker/Dockerfile (%v)", name, p, exposed)
		}
	}
	if t.Failed() {
		return
	}

	// Every flag and COHORT_* variable is one cohortd has.
	if testing.Short() {
		t.Skip("builds cohortd to read its flags")
	}
	flags := cohortdFlags(t)
	for name := range args {
		if _, ok := flags[name]; !ok {
			t.Errorf("--%s is not a cohortd flag", name)
		}
	}
	for name := range env {
		if !strings.HasPrefix(name, "COHORT_") || name == "COHORT_ENDPOINTS" { // COHORT_ENDPOINTS is cohortctl's
			continue
		}
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "COHORT_")), "_", "-")
		if _, ok := flags[flag]; !ok {
			t.Errorf("environment %s names no cohortd flag (--%s)", name, flag)
		}
	}
	if u := flags["http-addr"]; !strings.Contains(u, "/healthz") || !strings.Contains(u, "/readyz") {
		t.Errorf("cohortd --http-addr is documented as %q: the probe paths /healthz and /readyz are not among its endpoints", u)
	}
}

// parseArgs maps --name=value arguments to name -> value.
func parseArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Fatalf("argument %q: write flags as --name=value", a)
		}
		if _, dup := out[name]; dup {
			t.Fatalf("flag --%s given twice", name)
		}
		out[name] = value
	}
	return out
}

func portOf(t *testing.T, args map[string]string, flag string) int32 {
	t.Helper()
	v, ok := args[flag]
	if !ok {
		t.Fatalf("--%s is not set", flag)
	}
	i := strings.LastIndex(v, ":")
	p, err := strconv.ParseInt(v[i+1:], 10, 32)
	if i < 0 || err != nil {
		t.Fatalf("--%s=%s: no port", flag, v)
	}
	return int32(p)
}

func samePort(p intstr.IntOrString, name string, ports map[string]int32) bool {
	if p.Type == intstr.String {
		return p.StrVal == name && ports[name] != 0
	}
	return p.IntVal == ports[name]
}

func matches(selector, labels map[string]string) bool {
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

func dockerfile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func imageExposed(t *testing.T) map[int32]bool {
	t.Helper()
	out := map[int32]bool{}
	for _, line := range strings.Split(dockerfile(t), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "EXPOSE" {
			for _, p := range f[1:] {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Fatalf("Dockerfile EXPOSE %q: %v", p, err)
				}
				out[int32(n)] = true
			}
		}
	}
	return out
}

func imageUID(t *testing.T) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^USER (\d+)`).FindStringSubmatch(dockerfile(t))
	if m == nil {
		t.Fatal("Dockerfile has no numeric USER")
	}
	uid, _ := strconv.ParseInt(m[1], 10, 64)
	return uid
}

// cohortdFlags builds cohortd and reads its flags from --help: name ->
// usage text.
func cohortdFlags(t *testing.T) map[string]string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cohortd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/cohortd").CombinedOutput(); err != nil {
		t.Fatalf("go build cohortd: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("cohortd --help: %v\n%s", err, out)
	}
	flags := map[string]string{}
	re := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: \w+)?\s+(.*)$`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			flags[m[1]] = m[2]
		}
	}
	if len(flags) < 10 {
		t.Fatalf("read only %d flags from cohortd --help:\n%s", len(flags), out)
	}
	return flags
}
