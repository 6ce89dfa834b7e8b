package auth

import (
	"context"
	"log/slog"
	"os"
	"time"
)

// Reloadable is a credential read from files: Reload reads them again
// when they changed.
type Reloadable interface {
	Name() string
	Reload() (changed bool, err error)
}

// DefaultReloadInterval is how often Watch looks at the files.
const DefaultReloadInterval = 5 * time.Second

// Watch reloads rs every interval and on every signal received on sig
// (SIGHUP in cohortd) until ctx ends, logging each replacement and each
// refused reload (the credentials in force stay).
func Watch(ctx context.Context, log *slog.Logger, interval time.Duration, sig <-chan os.Signal, rs ...Reloadable) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-sig:
			log.Info("reloading credentials on signal")
		}
		for _, r := range rs {
			changed, err := r.Reload()
			switch {
			case err != nil:
				log.Error("credential reload refused; the ones in force stay", "what", r.Name(), "err", err)
			case changed:
				log.Info("credentials reloaded", "what", r.Name())
			}
		}
	}
}
