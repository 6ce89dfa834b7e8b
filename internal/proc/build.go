package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// BinDirEnv names an environment variable that points at a directory of
// prebuilt binaries (e.g. `make build`'s bin/): when it is set, Builds
// builds nothing and hands out the binaries there, named as `go build`
// names them.
const BinDirEnv = "COHORT_BIN_DIR"

// Builds builds Go main packages with `go build` on first use and hands out
// the same binaries for the rest of the process, so that a test binary
// builds cohortd once however many tests start it. The zero value is ready;
// Close removes what it built.
type Builds struct {
	mu   sync.Mutex
	dir  string            // temp dir of the built binaries
	bins map[string]string // package → binary
}

// Build returns the binaries of pkgs (import paths, or directories relative
// to the working directory), building in one `go build` those not built
// yet.
func (b *Builds) Build(ctx context.Context, pkgs ...string) ([]string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		out := make([]string, len(pkgs))
		for i, pkg := range pkgs {
			bin, err := binaryName(pkg)
			if err != nil {
				return nil, err
			}
			out[i] = filepath.Join(dir, bin)
			if _, err := os.Stat(out[i]); err != nil {
				return nil, fmt.Errorf("prebuilt binary of %s (%s=%s): %w", pkg, BinDirEnv, dir, err)
			}
		}
		return out, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bins == nil {
		b.bins = map[string]string{}
	}
	var missing []string
	for _, pkg := range pkgs {
		if _, ok := b.bins[pkg]; !ok && !slices.Contains(missing, pkg) {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 {
		if b.dir == "" {
			dir, err := os.MkdirTemp("", "cohort-bin-")
			if err != nil {
				return nil, fmt.Errorf("build %v: %w", missing, err)
			}
			b.dir = dir
		}
		names := map[string]string{}
		for _, pkg := range missing {
			name, err := binaryName(pkg)
			if err != nil {
				return nil, err
			}
			for other, bin := range b.bins {
				if filepath.Base(bin) == name {
					return nil, fmt.Errorf("build %s: its binary %s would replace %s's", pkg, name, other)
				}
			}
			if other, ok := names[name]; ok {
				return nil, fmt.Errorf("build %s and %s: both make a binary %s", other, pkg, name)
			}
			names[name] = pkg
		}
		args := append([]string{"build", "-o", b.dir + string(filepath.Separator)}, missing...)
		if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		for name, pkg := range names {
			b.bins[pkg] = filepath.Join(b.dir, name)
		}
	}
	out := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		out[i] = b.bins[pkg]
	}
	return out, nil
}

// Close removes the built binaries. Builds can build again after it.
func (b *Builds) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir == "" {
		return nil
	}
	err := os.RemoveAll(b.dir)
	b.dir, b.bins = "", nil
	return err
}

// binaryName is the file `go build -o dir/` writes for pkg: the last
// element of its import path, or of its directory.
func binaryName(pkg string) (string, error) {
	if pkg == "." || pkg == ".." || strings.HasPrefix(pkg, "./") || strings.HasPrefix(pkg, "../") || filepath.IsAbs(pkg) {
		abs, err := filepath.Abs(pkg)
		if err != nil {
			return "", fmt.Errorf("build %s: %w", pkg, err)
		}
		return filepath.Base(abs), nil
	}
	return path.Base(pkg), nil
}
