// Package k8s_test checks the Kubernetes manifests in this directory: each
// document decodes strictly (unknown or duplicate fields fail) into its
// k8s.io/api type (cert-manager's into a model of the fields used here),
// the objects agree with each other (selectors, service names, port names,
// replicas and --bootstrap-expect, the issuers behind the certificates),
// the container's flags, ports and probes agree with the cohortd binary
// and the image, and TLS and tokens are set up as cohortd needs them.
package k8s_test

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/auth"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded objects of every *.yaml file here.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	issuers      []*cmIssuer
	certificates []*cmCertificate
}

// cmIssuer and cmCertificate model the fields of cert-manager.io/v1
// Issuer and Certificate these manifests use (cert-manager's Go module is
// not a dependency): strict decoding catches a misspelt field, and a
// field added to a manifest must be added here.
type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		IsCA       bool     `json:"isCA,omitempty"`
		CommonName string   `json:"commonName,omitempty"`
		SecretName string   `json:"secretName"`
		Duration   string   `json:"duration,omitempty"`
		URIs       []string `json:"uris,omitempty"`
		Usages     []string `json:"usages,omitempty"`
		PrivateKey *struct {
			Algorithm string `json:"algorithm,omitempty"`
			Size      int    `json:"size,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
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
			case "cert-manager.io/v1/Issuer":
				o := &cmIssuer{}
				m.issuers, obj = append(m.issuers, o), o
			case "cert-manager.io/v1/Certificate":
				o := &cmCertificate{}
				m.certificates, obj = append(m.certificates, o), o
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

// csiDriverVars are the variables cert-manager's CSI driver fills in
// volume attributes (the kubelet's $(VAR) does not reach them).
var csiDriverVars = []string{"POD_NAME", "POD_NAMESPACE", "POD_UID", "SERVICE_ACCOUNT_NAME"}

// TestManifests_TLSAndTokens: cohortd serves mutual TLS with a
// certificate cert-manager's CSI driver issues per pod, naming the node
// principal of the pod's --node-id, from a CA Issuer defined here; the
// token file comes from a Secret the pods cannot start without.
func TestManifests_TLSAndTokens(t *testing.T) {
	m := load(t)
	if len(m.statefulSets) != 1 {
		t.Fatalf("want 1 StatefulSet, have %d", len(m.statefulSets))
	}
	pod := m.statefulSets[0].Spec.Template.Spec
	c := pod.Containers[0]
	args := parseArgs(t, c.Args)
	if _, ok := args["insecure"]; ok {
		t.Error("--insecure is set: the cluster would accept plaintext from anyone who reaches it")
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	// mountOf returns the volume mounted at file's directory.
	mountOf := func(flag string) (corev1.VolumeMount, corev1.Volume) {
		t.Helper()
		file, ok := args[flag]
		if !ok {
			t.Fatalf("--%s is not set", flag)
		}
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == path.Dir(file) {
				return vm, volumes[vm.Name]
			}
		}
		t.Fatalf("--%s=%s: no volume is mounted at %s", flag, file, path.Dir(file))
		return corev1.VolumeMount{}, corev1.Volume{}
	}

	// Certificate, key and CA: files the CSI driver writes into one
	// read-only volume.
	vm, v := mountOf("tls-cert")
	if v.CSI == nil || v.CSI.Driver != "csi.cert-manager.io" {
		t.Fatalf("--tls-cert is on volume %q, want a csi.cert-manager.io CSI volume: %+v", vm.Name, v.VolumeSource)
	}
	if !vm.ReadOnly || v.CSI.ReadOnly == nil || !*v.CSI.ReadOnly {
		t.Errorf("volume %s: mount readOnly %v, CSI readOnly %v; want both read-only", v.Name, vm.ReadOnly, v.CSI.ReadOnly)
	}
	attr := v.CSI.VolumeAttributes
	fileAttr := func(key, def string) string {
		if f := attr["csi.cert-manager.io/"+key]; f != "" {
			return f
		}
		return def // the driver's default
	}
	for flag, file := range map[string]string{
		"tls-cert": fileAttr("certificate-file", "tls.crt"),
		"tls-key":  fileAttr("privatekey-file", "tls.key"),
		"tls-ca":   fileAttr("ca-file", "ca.crt"),
	} {
		if want := path.Join(vm.MountPath, file); args[flag] != want {
			t.Errorf("--%s=%s, the CSI volume writes it to %s", flag, args[flag], want)
		}
	}
	for k, val := range attr {
		for _, ref := range regexp.MustCompile(`\$[({]([A-Za-z_]+)[)}]`).FindAllStringSubmatch(val, -1) {
			if !strings.HasPrefix(ref[0], "${") || !slices.Contains(csiDriverVars, ref[1]) {
				t.Errorf("volume attribute %s: %s is not a variable the CSI driver fills (${%s})", k, ref[0], strings.Join(csiDriverVars, "}, ${"))
			}
		}
	}

	// The certificate names node/<--node-id>: a pod's variables in the
	// attributes are the ones --node-id uses, so they agree for any pod.
	asCSI := strings.NewReplacer("$(", "${", ")", "}")
	wantURI := "cohort://node/" + asCSI.Replace(args["node-id"])
	if got := attr["csi.cert-manager.io/uri-sans"]; got != wantURI {
		t.Errorf("csi.cert-manager.io/uri-sans %q, want %q: the certificate must name the node principal of --node-id=%s", got, wantURI, args["node-id"])
	}
	pod0 := strings.NewReplacer("${POD_NAME}", "cohort-0", "${POD_NAMESPACE}", "ns")
	if u, err := url.Parse(pod0.Replace(attr["csi.cert-manager.io/uri-sans"])); err != nil {
		t.Errorf("uri-sans: %v", err)
	} else if p, err := auth.FromCertificate(&x509.Certificate{URIs: []*url.URL{u}}); err != nil || p != (auth.Principal{Role: auth.RoleNode, Name: "cohort-0"}) {
		t.Errorf("pod cohort-0's certificate would name %v (%v), want node/cohort-0", p, err)
	}
	dnsNames := strings.Split(attr["csi.cert-manager.io/dns-names"], ",")
	advertised := asCSI.Replace(args["grpc-advertise"][:strings.LastIndex(args["grpc-advertise"], ":")])
	if !slices.Contains(dnsNames, advertised) {
		t.Errorf("dns-names %v lack the advertised gRPC host %s", dnsNames, advertised)
	}
	usages := strings.Split(attr["csi.cert-manager.io/key-usages"], ",")
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(usages, u) {
			t.Errorf("key-usages %v lack %q: a node is a TLS server and a client of the other nodes", usages, u)
		}
	}
	fsGroup := "none"
	if g := pod.SecurityContext.FSGroup; g != nil {
		fsGroup = strconv.FormatInt(*g, 10)
	}
	if attr["csi.cert-manager.io/fs-group"] != fsGroup {
		t.Errorf("csi.cert-manager.io/fs-group %q, pod fsGroup %s: the process could not read its key", attr["csi.cert-manager.io/fs-group"], fsGroup)
	}

	// The issuer: a CA Issuer of this directory whose CA certificate is
	// made here too.
	if k, g := attr["csi.cert-manager.io/issuer-kind"], attr["csi.cert-manager.io/issuer-group"]; (k != "" && k != "Issuer") || (g != "" && g != "cert-manager.io") {
		t.Fatalf("issuer %s.%s: this test knows the Issuers of cert-manager.yaml only", k, g)
	}
	issuer := m.issuer(t, attr["csi.cert-manager.io/issuer-name"])
	if issuer.Spec.CA == nil || issuer.Spec.CA.SecretName == "" {
		t.Fatalf("Issuer %s: want a CA Issuer (spec.ca.secretName)", issuer.Name)
	}
	var caCert *cmCertificate
	for _, cert := range m.certificates {
		if cert.Spec.SecretName == issuer.Spec.CA.SecretName {
			caCert = cert
		}
	}
	if caCert == nil || !caCert.Spec.IsCA {
		t.Fatalf("no Certificate with isCA writes Secret %s, the CA of Issuer %s", issuer.Spec.CA.SecretName, issuer.Name)
	}
	if root := m.issuer(t, caCert.Spec.IssuerRef.Name); root.Spec.SelfSigned == nil {
		t.Errorf("CA Certificate %s is issued by %s, want a selfSigned Issuer", caCert.Name, root.Name)
	}
	for _, cert := range m.certificates {
		if cert.Spec.IsCA {
			continue
		}
		if cert.Spec.IssuerRef.Name != issuer.Name {
			t.Errorf("Certificate %s: issued by %s, not the CA Issuer %s the nodes trust", cert.Name, cert.Spec.IssuerRef.Name, issuer.Name)
		}
		var uris []*url.URL
		for _, s := range cert.Spec.URIs {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatalf("Certificate %s: uri %q: %v", cert.Name, s, err)
			}
			uris = append(uris, u)
		}
		if p, err := auth.FromCertificate(&x509.Certificate{URIs: uris}); err != nil {
			t.Errorf("Certificate %s names no principal: %v", cert.Name, err)
		} else if !slices.Contains(cert.Spec.Usages, "client auth") {
			t.Errorf("Certificate %s (%s): usages %v lack client auth", cert.Name, p, cert.Spec.Usages)
		}
	}

	// Tokens: a Secret mounted as a directory (the kubelet updates it in
	// place, cohortd re-reads it), required.
	vm, v = mountOf("token-file")
	if v.Secret == nil {
		t.Fatalf("--token-file is on volume %q, want a Secret volume", vm.Name)
	}
	if o := v.Secret.Optional; o != nil && *o {
		t.Errorf("Secret volume %s (%s) is optional: pods would start without the tokens", v.Name, v.Secret.SecretName)
	}
	if vm.SubPath != "" {
		t.Errorf("the token Secret is mounted with subPath %q: the kubelet never updates such a file", vm.SubPath)
	}
	if items := v.Secret.Items; len(items) > 0 && !slices.ContainsFunc(items, func(k corev1.KeyToPath) bool { return k.Path == path.Base(args["token-file"]) }) {
		t.Errorf("--token-file=%s: the Secret's items %v write no such file", args["token-file"], items)
	}
	for _, e := range c.Env {
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Optional != nil && *r.SecretKeyRef.Optional {
			t.Errorf("environment %s comes from an optional Secret: a missing Secret must stop the pod", e.Name)
		}
	}
}

func (m manifests) issuer(t *testing.T, name string) *cmIssuer {
	t.Helper()
	for _, i := range m.issuers {
		if i.Name == name {
			return i
		}
	}
	t.Fatalf("no Issuer %q in the manifests", name)
	return nil
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
