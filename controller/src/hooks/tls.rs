//! Telling a failed TLS handshake with the gateway from a gateway that
//! cannot be reached: both leave the call without an answer, but only the
//! first is put right by the `--gateway` URL or its certificates.

use std::error::Error;

/// How the TLS handshake with the gateway failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// What came back was not TLS (a plaintext gateway, reached with an
    /// `https://` URL, answers with HTTP/2 frames).
    NotTls,
    /// The handshake failed on TLS's own terms: a certificate that is not
    /// trusted or not for the gateway's name, a refused client certificate,
    /// no protocol version or cipher in common.
    Handshake,
}

impl TlsFailure {
    /// The failure a transport error's chain of sources shows, if any: a
    /// `rustls::Error`, on its own or inside the `std::io::Error` that the
    /// TLS stream reports it with (whose `source` skips it).
    pub(crate) fn of(error: &(dyn Error + 'static)) -> Option<TlsFailure> {
        let mut next = Some(error);
        while let Some(error) = next {
            let tls = error.downcast_ref::<rustls::Error>().or_else(|| {
                error
                    .downcast_ref::<std::io::Error>()
                    .and_then(std::io::Error::get_ref)
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            });
            if let Some(tls) = tls {
                return Some(match tls {
                    rustls::Error::InvalidMessage(_) => TlsFailure::NotTls,
                    _ => TlsFailure::Handshake,
                });
            }
            next = error.source();
        }
        None
    }

    /// What a hook error's message says before the transport's own words.
    pub(crate) fn explanation(self) -> &'static str {
        match self {
            TlsFailure::NotTls => {
                "the gateway answered without TLS (a plaintext gateway needs an http:// URL)"
            }
            TlsFailure::Handshake => "the TLS handshake with the gateway failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(inner: rustls::Error) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, inner)
    }

    #[test]
    fn records_that_are_not_tls_and_other_handshake_failures_are_told_apart() {
        let not_tls = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert_eq!(TlsFailure::of(&io(not_tls)), Some(TlsFailure::NotTls));
        let untrusted = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        assert_eq!(TlsFailure::of(&io(untrusted)), Some(TlsFailure::Handshake));
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(TlsFailure::of(&refused), None);
    }
}
