package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/capstan-dev/capstan/internal/atomicfile"
	"github.com/capstan-dev/capstan/internal/console"
)

// startConsole serves the web console. It acts only with the tokens of
// those who log in; the admin gets a one-time login link with the
// capstan-admin ServiceAccount's token.
func (c *Cluster) startConsole(ctx, runCtx context.Context) error {
	if err := c.ensureAdminToken(ctx, runCtx); err != nil {
		return fmt.Errorf("the admin's token: %w", err)
	}
	// The console's own identity has no rights: it acts with its users'.
	id, err := c.as(ctx, "console")
	if err != nil {
		return err
	}
	// The session key lives in the data dir: sessions survive a restart
	// of capstan up.
	keyFile := filepath.Join(c.ControlPlane.DataDir().PKIDir(), "console-session.key")
	if _, err := os.Stat(keyFile); errors.Is(err, fs.ErrNotExist) {
		if err := atomicfile.Write(keyFile, []byte(base64.StdEncoding.EncodeToString(console.NewSessionKey())+"\n"), 0o600); err != nil {
			return err
		}
	}
	key, err := console.LoadSessionKey(keyFile)
	if err != nil {
		return err
	}
	opts := console.Options{API: id.cfg, SessionKey: key, RevocationFile: filepath.Join(c.ControlPlane.DataDir().PKIDir(), "console-revoked-sessions.json"),
		TLSCertFile: c.opts.ConsoleTLSCertFile, TLSKeyFile: c.opts.ConsoleTLSKeyFile}
	if c.opts.Scheduler != nil {
		opts.Policy = c.opts.Scheduler.Policy
	}
	if c.ThanosQuerierURL != "" {
		pem, err := os.ReadFile(filepath.Join(c.ControlPlane.DataDir().PKIDir(), "ca.crt"))
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		opts.PrometheusURL, opts.PrometheusTLS = c.ThanosQuerierURL, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	srv, err := console.New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.opts.ConsoleAddress)
	if err != nil {
		// An extra, as the metrics endpoint: a busy port is a warning.
		c.Warnings = append(c.Warnings, fmt.Sprintf("console %s: %v", c.opts.ConsoleAddress, err))
		return nil
	}
	c.run(runCtx, "console", func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	c.ConsoleURL = srv.Scheme() + "://" + ln.Addr().String()
	c.console = srv
	c.ConsoleLoginLink = c.NewConsoleLoginLink(c.AdminToken())
	return nil
}

// NewConsoleLoginLink makes another one-time login link to the console,
// for token ("" when there is no console).
func (c *Cluster) NewConsoleLoginLink(token string) string {
	if c.console == nil {
		return ""
	}
	return c.console.LoginLink(c.ConsoleURL, token)
}

// AdminToken is the capstan-admin ServiceAccount's token (bound to
// cluster-admin) now, once the thanos-querier or the console made it.
func (c *Cluster) AdminToken() string {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	return c.adminToken
}
