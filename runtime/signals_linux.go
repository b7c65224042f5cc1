package runtime

/*
#include <signal.h>
#include <stdlib.h>

static int inferq_nsig(void) { return NSIG; }

// inferq_save_signals records the action of every signal 1..n-1; ok[i] says
// whether signal i could be read.
static void inferq_save_signals(struct sigaction *acts, int *ok, int n) {
	for (int i = 1; i < n; i++) {
		ok[i] = sigaction(i, NULL, &acts[i]) == 0;
	}
}

// inferq_restore_signals puts back every recorded action that changed and
// returns how many it put back.
static int inferq_restore_signals(struct sigaction *acts, int *ok, int n) {
	int restored = 0;
	for (int i = 1; i < n; i++) {
		struct sigaction cur;
		if (!ok[i] || sigaction(i, NULL, &cur) != 0) {
			continue;
		}
		if (cur.sa_handler == acts[i].sa_handler && cur.sa_flags == acts[i].sa_flags) {
			continue;
		}
		if (sigaction(i, &acts[i], NULL) == 0) {
			restored++;
		}
	}
	return restored;
}
*/
import "C"

import (
	"log/slog"
	"unsafe"
)

// withSignalHandlersKept runs fn, which loads the CUDA execution provider,
// and then puts back any signal action that changed meanwhile: the CUDA
// provider installs its own handlers over Go's, after which Go no longer
// sees SIGINT/SIGTERM and crashes are not reported
// (github.com/yalue/onnxruntime_go issue 140). Signal actions are
// process-wide, so calls are serialised. A signal.Notify for a signal that
// was ignored at start, racing with fn, would be undone; set up signal
// handling before creating CUDA sessions.
func withSignalHandlersKept(logger *slog.Logger, fn func() error) error {
	ortProcess.signals.Lock()
	defer ortProcess.signals.Unlock()
	n := C.inferq_nsig()
	acts := (*C.struct_sigaction)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.struct_sigaction{}))))
	ok := (*C.int)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(acts))
	defer C.free(unsafe.Pointer(ok))
	C.inferq_save_signals(acts, ok, n)
	defer func() {
		if r := C.inferq_restore_signals(acts, ok, n); r > 0 {
			logger.Info("signal handlers restored after loading the CUDA provider", "signals", int(r))
		}
	}()
	return fn()
}
