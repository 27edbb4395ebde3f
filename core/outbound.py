"""Which URLs Narrator may call out to (webhooks): no requests into private networks.

A user-supplied URL must be http(s), and every address its host resolves to must be public:
loopback, private (RFC 1918, ULA), link-local (cloud metadata at 169.254.169.254),
carrier-grade NAT, multicast, reserved and unspecified addresses are refused, unless they
are inside a network or host named in NARRATOR_OUTBOUND_ALLOW. The API checks at submit and
the worker checks again just before each delivery (the name may resolve elsewhere by then).
A delivery then connects to the very address that was checked (`pinned`), so a DNS answer
that changes between the check and the connection (DNS rebinding) cannot lead it elsewhere;
deliveries never follow redirects.
"""

import ipaddress
import socket
from functools import lru_cache
from urllib.parse import urlsplit, urlunsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


class RefusedURL(ValueError):
    """The URL may not be called; the message says why, for the client."""


@lru_cache
def _allowed(allow: str) -> tuple[frozenset[str], tuple[Network, ...]]:
    hosts, networks = set(), []
    for entry in (e.strip() for e in allow.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.lower())
    return frozenset(hosts), tuple(networks)


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _public(address: Address) -> bool:
    """Say whether an address is public; an IPv6 address that carries an IPv4 one (mapped,
    6to4 2002::/16, Teredo, NAT64 64:ff9b::/96) is judged by that one too, and site-local
    (fec0::/10, deprecated but still routed by some stacks) is private."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.is_site_local:
            return False
        carried = [address.ipv4_mapped, address.sixtofour,
                   address.teredo[1] if address.teredo else None,
                   ipaddress.IPv4Address(int(address) & 0xFFFFFFFF) if address in _NAT64 else None]
        if any(v4 is not None and not _public(v4) for v4 in carried):
            return False
        if address.ipv4_mapped is not None:
            return True
    return not (address.is_private or address.is_loopback or address.is_link_local
                or address.is_multicast or address.is_reserved or address.is_unspecified
                or address in _CGNAT)


def check(url: str, allow: str = "") -> str | None:
    """Raise RefusedURL unless `url` may be called; `allow`: NARRATOR_OUTBOUND_ALLOW.

    Returns the checked address to connect to, or None for a host allow-listed by name.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RefusedURL("must be an http or https URL")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a port that is not a number
        raise RefusedURL(f"is not a valid URL: {exc}") from exc
    if not host:
        raise RefusedURL("has no host")
    hosts, networks = _allowed(allow)
    if host.lower() in hosts:
        return None
    try:
        infos = socket.getaddrinfo(host, port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RefusedURL(f"host {host!r} does not resolve") from exc
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not _public(address) and not any(address in n for n in networks):
            raise RefusedURL(f"host {host!r} resolves to {address}, a private, loopback or "
                             "link-local address (allow it with NARRATOR_OUTBOUND_ALLOW)")
    return str(infos[0][4][0]).split("%", 1)[0]


def pinned(url: str, address: str | None) -> tuple[str, dict[str, str], dict[str, str]]:
    """Return `url` aimed at `address`, with the Host header and TLS name of the original.

    The result is (url, headers, httpx request extensions); certificates are still checked
    against the original host name (the `sni_hostname` extension).
    """
    parts = urlsplit(url)
    if address is None or parts.hostname is None:
        return url, {}, {}
    host = f"[{address}]" if ":" in address else address
    userinfo, _, hostport = parts.netloc.rpartition("@")
    netloc = (f"{userinfo}@" if userinfo else "") + host + (
        f":{parts.port}" if parts.port else "")
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), {"Host": hostport}, extensions
