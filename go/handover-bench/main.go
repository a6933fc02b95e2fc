// Command handover-bench measures the hand-over candidates docs/embedding-go.md weighs for
// streaming a response from listwatch (Rust, behind cgo) to N idle Go watchers: OS threads,
// file descriptors and RSS with N watchers waiting, per candidate.
//
//	go run . -mode cgo-blocked -n 10000   # each watcher blocks in a C call until data comes
//	go run . -mode socketpair -n 9000     # each watcher reads its own socket pair (netpoller)
//	go run . -mode pull -n 10000          # each watcher waits on a channel; one pipe wakes a dispatcher
//
// Standard library and cgo only (no modules), like go/listwatch.
package main

/*
#include <unistd.h>
// Blocks the calling thread until a byte arrives on fd, as a C stream's "next chunk" call
// would while the watch is idle.
static int wait_byte(int fd) { char c; return (int)read(fd, &c, 1); }
*/
import "C"

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

func status(field string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			return strings.TrimSpace(strings.TrimPrefix(l, field+":"))
		}
	}
	return "?"
}

func fds() int {
	e, _ := os.ReadDir("/proc/self/fd")
	return len(e)
}

func main() {
	mode := flag.String("mode", "pull", "cgo-blocked, socketpair or pull")
	n := flag.Int("n", 10000, "idle watchers")
	flag.Parse()
	before := fmt.Sprintf("threads %s, fds %d, RSS %s", status("Threads"), fds(), status("VmRSS"))
	var wg sync.WaitGroup
	var release func()
	start := time.Now()
	switch *mode {
	case "cgo-blocked":
		var p [2]int
		if err := syscall.Pipe(p[:]); err != nil {
			panic(err)
		}
		for i := 0; i < *n; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); C.wait_byte(C.int(p[0])) }()
		}
		release = func() { syscall.Write(p[1], make([]byte, *n)) }
	case "socketpair":
		ends := make([]*os.File, 0, *n)
		for i := 0; i < *n; i++ {
			fd, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
			if err != nil {
				fmt.Printf("socketpair %d: %v (open files: %d)\n", i, err, fds())
				os.Exit(1)
			}
			syscall.SetNonblock(fd[0], true)
			r := os.NewFile(uintptr(fd[0]), "r")
			w := os.NewFile(uintptr(fd[1]), "w")
			ends = append(ends, w)
			wg.Add(1)
			go func() { defer wg.Done(); b := make([]byte, 1); r.Read(b) }()
		}
		release = func() {
			for _, w := range ends {
				w.Write([]byte{0})
			}
		}
	case "pull":
		var p [2]int
		if err := syscall.Pipe(p[:]); err != nil {
			panic(err)
		}
		waiters := make([]chan struct{}, *n)
		for i := range waiters {
			waiters[i] = make(chan struct{})
			wg.Add(1)
			go func(c chan struct{}) { defer wg.Done(); <-c }(waiters[i])
		}
		// One dispatcher reads the wake-up pipe (as listwatch's lw_ready loop does) and
		// wakes the goroutines whose streams are ready.
		pipe := os.NewFile(uintptr(p[0]), "wake")
		go func() {
			b := make([]byte, 1)
			pipe.Read(b)
			for _, c := range waiters {
				close(c)
			}
		}()
		release = func() { syscall.Write(p[1], []byte{1}) }
	default:
		fmt.Println("unknown -mode")
		os.Exit(2)
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("%s, %d idle watchers: before: %s; waiting: threads %s, fds %d, RSS %s (set up in %v)\n",
		*mode, *n, before, status("Threads"), fds(), status("VmRSS"), time.Since(start).Round(time.Millisecond))
	release()
	wg.Wait()
}
