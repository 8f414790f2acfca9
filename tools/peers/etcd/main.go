// Command etcd runs a single-member etcd server for tests, embedding
// go.etcd.io/etcd/server/v3/embed. It prints one line "etcd ready <client-url>" on
// stdout once the server serves clients, and stops cleanly on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func parseURL(name, raw string) url.URL {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		log.Fatalf("--%s: not a URL: %q", name, raw)
	}
	return *u
}

func main() {
	dataDir := flag.String("data-dir", "", "data directory (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL, also advertised")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL, also advertised")
	name := flag.String("name", "default", "member name")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	noFsync := flag.Bool("unsafe-no-fsync", false, "skip fsync (faster; data lost on a crash)")
	quota := flag.Int64("quota-backend-bytes", 0, "backend size limit in bytes (0: etcd's default)")
	readyTimeout := flag.Duration("ready-timeout", time.Minute, "give up if not ready by then")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("--data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dataDir
	cfg.LogLevel = *logLevel
	cfg.UnsafeNoFsync = *noFsync
	cfg.QuotaBackendBytes = *quota
	client := parseURL("listen-client-url", *clientURL)
	peer := parseURL("listen-peer-url", *peerURL)
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	defer server.Close()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	select {
	case <-server.Server.ReadyNotify():
		fmt.Printf("etcd ready %s\n", client.String())
	case <-time.After(*readyTimeout):
		server.Server.Stop()
		log.Fatalf("etcd: not ready after %s", *readyTimeout)
	case sig := <-signals:
		log.Printf("etcd: %s before ready", sig)
		return
	}

	select {
	case err := <-server.Err():
		log.Fatalf("etcd: %v", err)
	case sig := <-signals:
		log.Printf("etcd: %s, stopping", sig)
	}
}
