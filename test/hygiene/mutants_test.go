package hygiene

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMutants_EveryPatchAppliesAndNamesItsKill keeps test/mutants in step
// with the code: a mutant whose patch no longer applies (the code it
// breaks moved) would be reported stale only when the mutation suite runs,
// long after make test passed. Each patch must apply to the tree as it is
// (git apply --check) and name what it is and what kills it.
func TestMutants_EveryPatchAppliesAndNamesItsKill(t *testing.T) {
	root := moduleRoot(t)
	git, err := exec.LookPath("git")
	if err == nil {
		_, err = os.Stat(filepath.Join(root, ".git"))
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the patches cannot be checked without git and a checkout: %v", err)
		}
		t.Skipf("needs git and a git checkout: %v", err)
	}
	patches, err := filepath.Glob(filepath.Join(root, "test", "mutants", "*.patch"))
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutants found under test/mutants (%v)", err)
	}
	for _, p := range patches {
		name := filepath.Base(p)
		body, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text := string(body)
		if !strings.HasPrefix(text, "# mutant: ") || !strings.Contains(text, "\n# kill: ") {
			t.Errorf("%s: starts without its \"# mutant: \" line or names no \"# kill: \" line", name)
		}
		cmd := exec.Command(git, "apply", "--check", p)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies (the code it breaks changed: remake it against the code as it is): %s", name, strings.TrimSpace(string(out)))
		}
	}
}
