// Command localhub-pki makes the certificates and keys of a localhub bed: one
// CA, a serving certificate for 127.0.0.1 and localhost that every API server
// of the bed presents, a client certificate for the bed's administrator
// (group system:masters), and the key pair that signs and checks service
// account tokens. Everything is made fresh for each bed and never leaves its
// directory.
//
// Usage: localhub-pki DIR
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validFor is how long the bed's certificates are valid: a bed lives for a
// test run or a working day, and a clock a little off must not refuse it.
const validFor = 30 * 24 * time.Hour

type issued struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: localhub-pki DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "localhub-pki:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, err := issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "localhub-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
	if err != nil {
		return err
	}
	serving, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhub-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}, &ca)
	if err != nil {
		return err
	}
	admin, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhub-admin", Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, &ca)
	if err != nil {
		return err
	}
	signer, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	for name, item := range map[string]issued{"ca": ca, "serving": serving, "admin": admin} {
		if err := write(dir, name, item); err != nil {
			return err
		}
	}
	return writeSigner(dir, signer)
}

// issue signs template with parent's key (itself when parent is nil).
func issue(template *x509.Certificate, parent *issued) (issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issued{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return issued{}, err
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(validFor)
	signerCert, signerKey := template, key
	if parent != nil {
		signerCert, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, template, signerCert, &key.PublicKey, signerKey)
	if err != nil {
		return issued{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return issued{}, err
	}
	return issued{cert: cert, key: key}, nil
}

func write(dir, name string, item issued) error {
	keyDER, err := x509.MarshalECPrivateKey(item.key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", item.cert.Raw); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+".key"), "EC PRIVATE KEY", keyDER)
}

func writeSigner(dir string, key *ecdsa.PrivateKey) error {
	private, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	public, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "service-accounts.key"), "EC PRIVATE KEY", private); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "service-accounts.pub"), "PUBLIC KEY", public)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
