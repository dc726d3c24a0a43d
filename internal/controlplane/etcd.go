package controlplane

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// etcdServer is an embedded single-member etcd.
type etcdServer struct {
	etcd      *embed.Etcd
	clientURL string
}

func startEtcd(dataDir, logFile string, clientPort, peerPort int, noFsync bool) (*etcdServer, error) {
	cfg := embed.NewConfig()
	cfg.Name = "capstan"
	cfg.Dir = dataDir
	clientURL := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(clientPort)}
	peerURL := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{logFile}
	// Room for large simulated clusters; the apiserver compacts history
	// every five minutes itself.
	cfg.QuotaBackendBytes = 8 << 30
	cfg.UnsafeNoFsync = noFsync
	cfg.MaxTxnOps = 10000

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd in %s: %w", filepath.Dir(dataDir), err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(2 * time.Minute):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd did not become ready within 2 minutes (see %s)", logFile)
	}
	return &etcdServer{etcd: e, clientURL: clientURL.String()}, nil
}

func (s *etcdServer) stop() {
	s.etcd.Close()
}
