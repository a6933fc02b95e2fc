// Command kube-apiserver (the listwatch fork): kube-apiserver 1.36 with listwatch serving
// LIST, GET, WATCH and watch-list of the resources it knows, innermost in kube-apiserver's
// handler chain (listwatch.patch puts it there). It takes kube-apiserver's flags unchanged
// and builds listwatch's etcd source from them: --etcd-servers, --etcd-cafile,
// --etcd-certfile, --etcd-keyfile, --encryption-provider-config. Its own flags:
// --listwatch=false runs it as the unmodified kube-apiserver; --listwatch-* set listwatch's
// server tunables; kube-apiserver's watch cache is off for the resources listwatch serves
// unless --watch-cache-sizes or --listwatch-keep-watch-cache is given.
//
// build.sh copies this file into a copy of the extracted kube-apiserver tree, beside the
// build-info file of ../shared/k8s/build.sh's plain main, and builds it there.
package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	_ "time/tzdata" // for CronJob time zones, as kube-apiserver's own main

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics, as kube-apiserver's own main
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"

	"listwatch.local/listwatch"
)

func main() {
	command := app.NewAPIServerCommand()
	enabled := command.Flags().Bool("listwatch", true,
		"Serve LIST, GET, WATCH and watch-list of listwatch's resources with listwatch, which follows the etcd of --etcd-servers itself. false: the unmodified kube-apiserver.")
	tunables := addServerFlags(command.Flags())
	keepCache := command.Flags().Bool("listwatch-keep-watch-cache", false,
		"Keep kube-apiserver's watch cache for the resources listwatch serves. By default it is off for them (--watch-cache-sizes=<resource>#0 each, unless --watch-cache-sizes is given): listwatch holds them already, and what falls through to kube-apiserver reads etcd.")
	run := command.RunE
	command.RunE = func(cmd *cobra.Command, args []string) error {
		if *enabled && !cmd.Flags().Changed("version") {
			lw, err := start(cmd.Flags(), tunables, *keepCache)
			if err != nil {
				return err
			}
			if lw != nil {
				defer lw.Close() // also a pre-shutdown hook (listwatch.patch): the second call returns at once
			}
		}
		return run(cmd, args)
	}
	os.Exit(cli.Run(command))
}

// start builds listwatch from kube-apiserver's own flags and hooks it into the handler
// chain; nil (kube-apiserver alone, with a warning) when the flags name a storage layout
// listwatch does not read.
func start(fs *pflag.FlagSet, tunables *serverFlags, keepCache bool) (*listwatch.ListWatch, error) {
	str := func(name string) string {
		v, _ := fs.GetString(name)
		return v
	}
	servers, _ := fs.GetStringSlice("etcd-servers")
	if len(servers) == 0 {
		return nil, nil // kube-apiserver itself refuses to start without them
	}
	// listwatch reads kube-apiserver's default key layout from one etcd.
	if p := str("etcd-prefix"); p != "/registry" && p != "/registry/" {
		klog.Warningf("listwatch: off: it reads the etcd prefix /registry, not --etcd-prefix=%s", p)
		return nil, nil
	}
	if o, _ := fs.GetStringSlice("etcd-servers-overrides"); len(o) > 0 {
		klog.Warningf("listwatch: off: --etcd-servers-overrides puts resources in other etcds")
		return nil, nil
	}
	grace, _ := fs.GetDuration("shutdown-watch-termination-grace-period")
	lw, err := listwatch.New(listwatch.Config{
		Etcd: &listwatch.EtcdConfig{
			Servers:                  servers,
			CAFile:                   str("etcd-cafile"),
			CertFile:                 str("etcd-certfile"),
			KeyFile:                  str("etcd-keyfile"),
			EncryptionProviderConfig: str("encryption-provider-config"),
		},
		// Authorization already ran in the chain; listwatch has no authorizer of its own and
		// uses the user for its per-user caps and its request log.
		UserFrom: func(r *http.Request) (listwatch.User, bool) {
			u, ok := request.UserFrom(r.Context())
			if !ok {
				return listwatch.User{}, false
			}
			return listwatch.User{Name: u.GetName(), Groups: u.GetGroups()}, true
		},
		// APF holds a seat for a watch until it is initialized, as for its own watches.
		Initialized: func(r *http.Request) { utilflowcontrol.WatchInitialized(r.Context()) },
		DrainGrace:  grace,
		Server:      tunables.config(fs),
	})
	if err != nil {
		return nil, fmt.Errorf("listwatch: %w", err)
	}
	genericapiserver.ListWatch.Wrap = lw.Wrap
	genericapiserver.ListWatch.Ready = healthz.NamedCheck("listwatch", func(*http.Request) error { return lw.Ready() })
	genericapiserver.ListWatch.Close = func() error {
		start := time.Now()
		err := lw.Close()
		klog.Infof("listwatch: drained and closed in %v (err: %v)", time.Since(start), err)
		return err
	}
	registerMetrics(lw)
	if !keepCache && !fs.Changed("watch-cache-sizes") {
		// Set before kube-apiserver's RunE builds its storage from the parsed options.
		off := watchCacheOff()
		if err := fs.Set("watch-cache-sizes", strings.Join(off, ",")); err != nil {
			return nil, fmt.Errorf("listwatch: --watch-cache-sizes: %w", err)
		}
		klog.Infof("listwatch: kube-apiserver's watch cache is off for the %d resources listwatch serves", len(off))
	}
	klog.Infof("listwatch: serving reads, following etcd %v", servers)
	return lw, nil
}

// serverFlags are listwatch's serving tunables as --listwatch-* flags. Their defaults are
// chosen for a listwatch that sits behind kube-apiserver's own admission: priority and
// fairness (or --max-requests-inflight) has admitted every request that reaches listwatch,
// and its flows already share the server between users. listwatch's own per-user caps
// (100 LISTs, 10,000 watches a user, made for the standalone server) would refuse with 429
// what kube-apiserver accepted — 5,000 nodes' watch-lists of one user, say — so they are
// off unless set; its LIST cap follows kube-apiserver's in-flight limits.
type serverFlags struct {
	maxLists, maxListsPerUser, maxWatchesPerUser, bufferBudget, chunkBytes, shareBytes int
	bookmarkInterval                                                                   time.Duration
}

func addServerFlags(fs *pflag.FlagSet) *serverFlags {
	s := &serverFlags{}
	fs.IntVar(&s.maxLists, "listwatch-max-lists", 0,
		"LISTs and watch-lists listwatch streams at once; beyond it 429. 0: --max-requests-inflight + --max-mutating-requests-inflight (what priority and fairness admits at once); -1: no cap.")
	fs.IntVar(&s.maxListsPerUser, "listwatch-max-lists-per-user", 0,
		"LISTs and watch-lists one user may have streaming through listwatch at once; 0: no cap (priority and fairness shares the server between flows).")
	fs.IntVar(&s.maxWatchesPerUser, "listwatch-max-watches-per-user", 0,
		"Watches one user may hold open on listwatch; 0: no cap.")
	fs.IntVar(&s.bufferBudget, "listwatch-response-buffer-bytes", 0,
		"Bytes all streaming LISTs and watch-lists may buffer together, two chunks each; beyond it 429. 0: listwatch's default (256 MiB).")
	// 16 KiB, not listwatch's 64: HTTP/2 and TLS send at most 16 KiB a frame or record
	// anyway, a response in flight holds two chunks, and the buffer budget then admits
	// 8,192 responses at once instead of 2,048 (a kubelet storm's watch-lists were refused
	// with 429 beyond that).
	fs.IntVar(&s.chunkBytes, "listwatch-chunk-bytes", 16<<10,
		"Bytes of one response chunk at most (a response in flight holds two). 0: listwatch's default (64 KiB).")
	fs.IntVar(&s.shareBytes, "listwatch-protobuf-share-bytes", 0,
		"Bytes of protobuf items kept for concurrent LISTs and watch-lists to share, instead of each transcoding them. 0: listwatch's default (32 MiB); -1: none kept.")
	fs.DurationVar(&s.bookmarkInterval, "listwatch-bookmark-interval", 0,
		"Period of bookmarks on watches that asked for them. 0: listwatch's default (1m).")
	return s
}

// config turns the flags into listwatch's ServerConfig; kube-apiserver's own flags give
// the LIST cap's default.
func (s *serverFlags) config(fs *pflag.FlagSet) listwatch.ServerConfig {
	maxLists := s.maxLists
	if maxLists == 0 {
		reads, _ := fs.GetInt("max-requests-inflight")
		writes, _ := fs.GetInt("max-mutating-requests-inflight")
		maxLists = reads + writes
		if reads <= 0 || writes <= 0 {
			maxLists = -1 // kube-apiserver: a limit of 0 is no limit
		}
	}
	noCap := func(v int) int { // the flags' 0 (per user) and -1 are listwatch's NoLimit
		if v <= 0 {
			return listwatch.NoLimit
		}
		return v
	}
	return listwatch.ServerConfig{
		MaxLists:             noCap(maxLists),
		MaxListsPerUser:      noCap(s.maxListsPerUser),
		MaxWatchesPerUser:    noCap(s.maxWatchesPerUser),
		ResponseBufferBudget: s.bufferBudget,
		ChunkBytes:           s.chunkBytes,
		BookmarkInterval:     s.bookmarkInterval,
		ProtobufShareBytes:   s.shareBytes,
	}
}

// watchCacheOff is --watch-cache-sizes turning kube-apiserver's watch cache off for every
// resource listwatch serves.
func watchCacheOff() []string {
	served := listwatch.BuiltinResources()
	out := make([]string, len(served))
	for i, r := range served {
		out[i] = r + "#0"
	}
	return out
}
