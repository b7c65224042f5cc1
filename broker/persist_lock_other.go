//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package broker

// lockDir does not lock on this platform: one broker per data dir is up to
// the operator.
func lockDir(string) (func(), error) { return func() {}, nil }
