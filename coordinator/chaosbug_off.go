//go:build !chaosbug

package coordinator

// staleReadBug is off: reads are stale only when they ask to be
// (chaosbug.go has the broken build).
const staleReadBug = false
