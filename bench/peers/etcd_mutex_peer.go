// etcd_mutex_peer: one contender in dlock_bench_etcd's hand-off comparison,
// using etcd's own lock (go.etcd.io/etcd/clientv3/concurrency.Mutex, the
// engine of `etcdctl lock`), from Debian's golang-etcd-server-dev.
//
//	etcd_mutex_peer ENDPOINTS NAME SECONDS HOLD_US OUT
//
// One session (TTL 10 s) and one Mutex for the whole run, as a long-lived
// service would hold them. Each acquisition appends "acquired_ns released_ns"
// (wall clock, nanoseconds) to OUT; the critical section sleeps HOLD_US.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func die(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "etcd_mutex_peer: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 6 {
		die("usage: etcd_mutex_peer ENDPOINTS NAME SECONDS HOLD_US OUT")
	}
	seconds, err1 := strconv.ParseFloat(os.Args[3], 64)
	holdUs, err2 := strconv.Atoi(os.Args[4])
	if err1 != nil || err2 != nil {
		die("SECONDS and HOLD_US must be numbers")
	}
	out, err := os.OpenFile(os.Args[5], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0644)
	if err != nil {
		die("%v", err)
	}
	w := bufio.NewWriter(out)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(os.Args[1], ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		die("connect: %v", err)
	}
	defer cli.Close()
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		die("session: %v", err)
	}
	defer session.Close()
	mutex := concurrency.NewMutex(session, os.Args[2])
	ctx := context.Background()
	end := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	for time.Now().Before(end) {
		if err := mutex.Lock(ctx); err != nil {
			die("lock: %v", err)
		}
		acquired := time.Now().UnixNano()
		time.Sleep(time.Duration(holdUs) * time.Microsecond)
		released := time.Now().UnixNano()
		if err := mutex.Unlock(ctx); err != nil {
			die("unlock: %v", err)
		}
		fmt.Fprintf(w, "%d %d\n", acquired, released)
	}
	w.Flush()
}
