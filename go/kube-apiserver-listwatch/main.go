// Command kube-apiserver (the listwatch fork): kube-apiserver 1.36 with listwatch serving
// LIST, GET, WATCH and watch-list of the resources it knows, innermost in kube-apiserver's
// handler chain (listwatch.patch puts it there). It takes kube-apiserver's flags unchanged
// and builds listwatch's etcd source from them: --etcd-servers, --etcd-cafile,
// --etcd-certfile, --etcd-keyfile, --encryption-provider-config. One flag is added:
// --listwatch=false runs it as the unmodified kube-apiserver.
//
// build.sh copies this file into a copy of the extracted kube-apiserver tree, beside the
// build-info file of ../shared/k8s/build.sh's plain main, and builds it there.
package main

import (
	"fmt"
	"net/http"
	"os"
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
	run := command.RunE
	command.RunE = func(cmd *cobra.Command, args []string) error {
		if *enabled && !cmd.Flags().Changed("version") {
			lw, err := start(cmd.Flags())
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
func start(fs *pflag.FlagSet) (*listwatch.ListWatch, error) {
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
	klog.Infof("listwatch: serving reads, following etcd %v", servers)
	return lw, nil
}
