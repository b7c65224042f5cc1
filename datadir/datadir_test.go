package datadir_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/inferq/inferq/datadir"
)

// A second lock on a held directory fails at once, naming the directory
// and the holder's pid; once released, the directory can be taken again.
func TestAcquireHeldDirFails(t *testing.T) {
	dir := t.TempDir()
	first, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = datadir.Acquire(dir)
	checkLocked(t, err, dir, os.Getpid())
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	if err := again.Release(); err != nil {
		t.Fatal(err)
	}
}

// The lock holds between processes, and a holder that is killed leaves no
// stale lock behind.
func TestAcquireHeldByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldDir$")
	cmd.Env = append(os.Environ(), "DATADIR_TEST_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	_, err = datadir.Acquire(dir)
	checkLocked(t, err, dir, cmd.Process.Pid)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	l, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	_ = l.Release()
}

// TestHelperHoldDir is the other process of TestAcquireHeldByAnotherProcess:
// it holds the directory until its stdin closes.
func TestHelperHoldDir(t *testing.T) {
	dir := os.Getenv("DATADIR_TEST_HOLD")
	if dir == "" {
		t.Skip("run by TestAcquireHeldByAnotherProcess")
	}
	l, err := datadir.Acquire(dir)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = l.Release()
	os.Exit(0)
}

func checkLocked(t *testing.T, err error, dir string, pid int) {
	t.Helper()
	if !errors.Is(err, datadir.ErrLocked) {
		t.Fatalf("second Acquire: %v, want ErrLocked", err)
	}
	var le *datadir.LockedError
	if !errors.As(err, &le) || le.Dir != dir || le.PID != pid {
		t.Fatalf("second Acquire: %#v, want Dir %s PID %d", le, dir, pid)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "process "+strconv.Itoa(pid)) {
		t.Fatalf("error %q does not name the directory and pid %d", msg, pid)
	}
}
