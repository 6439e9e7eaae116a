// Command cluster-gate is an OCM rollout plugin in Go (grpc-go): it
// validates each cluster's rollout, failing the clusters named by -fail and
// passing the others, and logs each placement's progress.
//
// It prints "cluster-gate listening grpc=ADDR" on stdout once bound, logs on
// stderr, serves grpc.health.v1.Health, and drains on SIGTERM or Ctrl-C.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "open-cluster-management.io/rollout-hooks/gen/go/ocm/rolloutplugin/v1alpha1"
)

// maxMessageBytes is the SDK's default, so a 10,000-cluster state fits.
const maxMessageBytes = 16 << 20

// NewServer is the gRPC server of the plugin: the gate and health.
func NewServer(gate *Gate, opts ...grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(maxMessageBytes), grpc.MaxSendMsgSize(maxMessageBytes))
	server := grpc.NewServer(opts...)
	pb.RegisterRolloutPluginServiceServer(server, &Service{Gate: gate})
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus("ocm.rolloutplugin.v1alpha1.RolloutPluginService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(server, h)
	return server
}

func tlsCredentials(certFile, keyFile, clientCA string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	config := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("--client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s holds no certificate", clientCA)
		}
		config.ClientCAs = pool
		config.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(config), nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7005", "gRPC address to serve on (port 0 picks a free port)")
	fail := flag.String("fail", "", "comma-separated clusters that fail validation (not while aborting)")
	tlsCert := flag.String("tls-cert", "", "serve TLS with this certificate chain (PEM)")
	tlsKey := flag.String("tls-key", "", "the private key of -tls-cert (PEM)")
	clientCA := flag.String("client-ca", "", "require client certificates signed by this CA (mutual TLS)")
	flag.Parse()
	log.SetOutput(os.Stderr)
	log.SetPrefix(Name + " ")

	var opts []grpc.ServerOption
	if (*tlsCert == "") != (*tlsKey == "") || (*clientCA != "" && *tlsCert == "") {
		fmt.Fprintln(os.Stderr, "cluster-gate: -tls-cert and -tls-key go together; -client-ca needs them")
		os.Exit(2)
	}
	if *tlsCert != "" {
		creds, err := tlsCredentials(*tlsCert, *tlsKey, *clientCA)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cluster-gate:", err)
			os.Exit(2)
		}
		opts = append(opts, grpc.Creds(creds))
	}
	gate := NewGate(strings.Split(*fail, ","))
	server := NewServer(gate, opts...)
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster-gate:", err)
		os.Exit(1)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-signals
		log.Print("draining")
		done := make(chan struct{})
		go func() { server.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			server.Stop()
		}
	}()
	log.Printf("blocking %v", gate.BlockedList())
	fmt.Printf("%s listening grpc=%s\n", Name, lis.Addr())
	if err := server.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
