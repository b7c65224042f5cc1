//go:build linux && (amd64 || arm64)

package runtime

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/inferq/inferq/models/examples"
	"github.com/inferq/inferq/tensor"
)

// kernelSigaction is the kernel's struct sigaction on amd64 and arm64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const sigIgn = 1

// rtSigaction sets (when act is not nil) and returns a signal's action,
// bypassing both Go's runtime and libc, the way a foreign library would.
func rtSigaction(t *testing.T, sig syscall.Signal, act *kernelSigaction) kernelSigaction {
	t.Helper()
	var old kernelSigaction
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(act)),
		uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		t.Fatalf("rt_sigaction(%v): %v", sig, e)
	}
	return old
}

// TestSignalHandlersKept does what the CUDA provider does while a session
// is created (replace the handlers of SIGTERM and SIGUSR2) inside
// withSignalHandlersKept, creating a CPU session in the same call, and
// checks that Go's handlers are back and deliver both signals afterwards.
func TestSignalHandlersKept(t *testing.T) {
	lib, err := LocateLibrary(LibrarySearch{Env: os.Getenv("INFERQ_ORT_LIB"), WorkDir: ".."})
	if err != nil {
		t.Skipf("onnxruntime library not available: %v", err)
	}
	env, err := NewEnv(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Close() })

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	goTerm := rtSigaction(t, syscall.SIGTERM, nil)
	if goTerm.handler == 0 || goTerm.handler == sigIgn {
		t.Fatalf("Go has no SIGTERM handler to keep: %+v", goTerm)
	}

	var s *Session
	err = withSignalHandlersKept(env.logger, func() error {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGUSR2} {
			rtSigaction(t, sig, &kernelSigaction{handler: sigIgn})
		}
		var err error
		s, err = NewSession(env, SessionConfig{Name: "mlp", Model: examples.MLP(), IntraOpThreads: 1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	if now := rtSigaction(t, syscall.SIGTERM, nil); now.handler != goTerm.handler || now.flags != goTerm.flags {
		t.Fatalf("SIGTERM action after the call = %+v, want Go's %+v", now, goTerm)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGUSR2} {
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-sigs:
			if got != sig {
				t.Errorf("received %v, want %v", got, sig)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%v not delivered to Go after the handlers were replaced and restored", sig)
		}
	}
	// The session made on the way works.
	if _, err := s.Run(t.Context(), []tensor.Tensor{tensor.NewTensor("x", []int64{1, examples.MLPInputs}, make([]float32, examples.MLPInputs))}); err != nil {
		t.Fatal(err)
	}
}
