//! Where a webhook may be sent (the SSRF guard). Without the operator's
//! `--webhooks-allow-private-targets`, a URL must be `https://` and its host must resolve only
//! to public addresses: no loopback, private (RFC 1918, unique local), link-local (the cloud
//! metadata address 169.254.169.254 among them), shared (100.64/10), unspecified, broadcast,
//! multicast or documentation address. The check runs when an endpoint is saved and again
//! before every attempt, and the attempt connects only to the addresses it checked, so a name
//! that resolves elsewhere later (DNS rebinding) gains nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;

/// The addresses an attempt may connect to for `url`, or why none.
pub async fn resolve(url: &str, allow_private: bool) -> Result<(Url, Vec<SocketAddr>), String> {
    let url = Url::parse(url).map_err(|e| format!("url is not a URL: {e}"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => {
            return Err(
                "url must be https:// (plain http only where the operator allows private targets)"
                    .into(),
            )
        }
        other => return Err(format!("url scheme {other} is not http(s)")),
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| "url has no port".to_string())?;
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| "url must name a host".to_string())?;
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match literal.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| format!("url's host {host} does not resolve: {e}"))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err("url's host resolves to no address".into());
    }
    if !allow_private {
        if let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
            return Err(format!(
                "url's host resolves to {}, a private, loopback or link-local address",
                bad.ip()
            ));
        }
    }
    Ok((url, addrs))
}

/// Whether `ip` is an address of the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first == 0x2001 && ip.segments()[1] == 0x0db8)
        || ip.to_ipv4().is_some_and(|v4| !is_public_v4(v4)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_public(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["1.1.1.1", "93.184.216.34", "2606:4700:4700::1111"] {
            assert!(is_public(ip.parse().expect("ip")), "{ip}");
        }
    }

    #[tokio::test]
    async fn a_loopback_or_metadata_target_is_refused_without_the_flag() {
        for url in [
            "https://127.0.0.1/hook",
            "https://169.254.169.254/latest",
            "https://[::1]:8443/",
        ] {
            let err = resolve(url, false).await.expect_err(url);
            assert!(err.contains("private, loopback or link-local"), "{err}");
        }
        assert!(resolve("http://127.0.0.1:9/x", false).await.is_err());
        let (_, addrs) = resolve("http://127.0.0.1:9/x", true)
            .await
            .expect("allowed");
        assert_eq!(addrs, vec!["127.0.0.1:9".parse().expect("addr")]);
    }
}
