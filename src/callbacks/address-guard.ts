import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * The guard against callbacks aimed inside the network Kiln runs in (server-side request
 * forgery): a callback URL must be http: or https:, and its host may neither be nor
 * resolve to an address outside the public unicast ranges — loopback, private (RFC 1918,
 * IPv6 unique local), link-local (cloud metadata at 169.254.169.254 included),
 * unspecified, carrier-grade NAT, multicast, reserved, and the IPv6 forms that embed an
 * IPv4 address (mapped, NAT64, 6to4, Teredo). The URL is checked at submission, and each
 * delivery connects only to addresses checked as it resolves them (`guardedLookup`), so a
 * name that resolves to something else later (DNS rebinding) is refused then.
 */

/** What kind of address `address` is when it may not be called back ("a loopback address"), or null when it is public unicast. */
export function blockedAddressKind(address: string): string | null {
  if (!ipaddr.isValid(address)) return 'not an IP address';
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  }
  const range = parsed.range();
  if (range === 'unicast') return null;
  const described = describeRange(range);
  return `${/^[aeiou]/.test(described) ? 'an' : 'a'} ${described} address`;
}

function describeRange(range: string): string {
  switch (range) {
    case 'loopback':
      return 'loopback';
    case 'private':
    case 'uniqueLocal':
      return 'private';
    case 'linkLocal':
      return 'link-local';
    case 'unspecified':
      return 'unspecified';
    default:
      return `non-public (${range})`;
  }
}

export type Lookup = (hostname: string) => Promise<string[]>;

/** Every address a name resolves to, as the operating system's resolver answers (dns.lookup). */
export const systemLookup: Lookup = (hostname) =>
  new Promise((resolve, reject) => {
    dnsLookup(hostname, { all: true, verbatim: true }, (error, addresses) => {
      if (error) reject(error);
      else resolve(addresses.map((entry) => entry.address));
    });
  });

/** The host of a URL as a bare name or address (IPv6 without its brackets). */
function hostOf(url: URL): string {
  const host = url.hostname;
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/**
 * What can be told of a callback URL without resolving it: a problem (not http(s), an
 * address that is not public), or its host name to resolve (null: nothing to resolve,
 * an allowed address or `allowPrivate`).
 */
export function urlProblemBeforeLookup(
  raw: string,
  allowPrivate: boolean,
): { problem: string } | { problem: null; hostname: string | null } {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { problem: 'must be an absolute http: or https: URL' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return { problem: `must be an http: or https: URL, got ${url.protocol}` };
  }
  if (allowPrivate) return { problem: null, hostname: null };
  const host = hostOf(url);
  if (isIP(host) === 0) return { problem: null, hostname: host };
  const kind = blockedAddressKind(host);
  return kind === null
    ? { problem: null, hostname: null }
    : { problem: `${host} is ${kind}; callbacks to private addresses are refused` };
}

/**
 * Why a callback URL is refused, or null when it may be called (a submission's check).
 * With `allowPrivate` only the scheme is checked.
 */
export async function callbackUrlProblem(
  raw: string,
  options: { allowPrivate: boolean; lookup?: Lookup },
): Promise<string | null> {
  const first = urlProblemBeforeLookup(raw, options.allowPrivate);
  if (first.problem !== null) return first.problem;
  const host = first.hostname;
  if (host === null) return null;
  let addresses: string[];
  try {
    addresses = await (options.lookup ?? systemLookup)(host);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    return `the host ${host} does not resolve${typeof code === 'string' ? ` (${code})` : ''}`;
  }
  if (addresses.length === 0) return `the host ${host} does not resolve`;
  for (const address of addresses) {
    const kind = blockedAddressKind(address);
    if (kind !== null)
      return `the host ${host} resolves to ${address}, ${kind}; callbacks to private addresses are refused`;
  }
  return null;
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net.connect/tls.connect that resolves as dns.lookup does and refuses
 * the connection when any address it finds is not public: the connection goes only to
 * an address that was checked, whatever the name resolved to at submission.
 */
export function guardedLookup(
  hostname: string,
  options: { all?: boolean; family?: number | string; hints?: number },
  callback: LookupCallback,
): void {
  dnsLookup(hostname, { ...options, all: true } as { all: true }, (error, addresses) => {
    if (error) {
      callback(error, options.all === true ? [] : '');
      return;
    }
    for (const entry of addresses) {
      const kind = blockedAddressKind(entry.address);
      if (kind !== null) {
        const refused = new Error(
          `the host ${hostname} resolves to ${entry.address}, ${kind}; the callback is refused`,
        );
        (refused as NodeJS.ErrnoException).code = 'EPRIVATEADDRESS';
        callback(refused, options.all === true ? [] : '');
        return;
      }
    }
    const first = addresses[0];
    if (options.all === true) callback(null, addresses);
    else if (first === undefined)
      callback(Object.assign(new Error(`${hostname} does not resolve`), { code: 'ENOTFOUND' }), '');
    else callback(null, first.address, first.family);
  });
}
