import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { blockedAddressKind, callbackUrlProblem, guardedLookup } from '../../src/callbacks/address-guard.js';

describe('the callback address guard', () => {
  it('lets public unicast addresses through', () => {
    for (const address of ['8.8.8.8', '93.184.215.14', '2606:4700:4700::1111', '::ffff:8.8.8.8']) {
      assert.equal(blockedAddressKind(address), null, address);
    }
  });

  it('refuses loopback, private, link-local, unspecified and other non-public ranges, IPv4-mapped too', () => {
    for (const [address, kind] of [
      ['127.0.0.1', 'a loopback address'],
      ['127.8.9.10', 'a loopback address'],
      ['::1', 'a loopback address'],
      ['::ffff:127.0.0.1', 'a loopback address'],
      ['10.0.0.1', 'a private address'],
      ['172.16.5.4', 'a private address'],
      ['192.168.1.1', 'a private address'],
      ['::ffff:10.0.0.1', 'a private address'],
      ['fd12:3456::1', 'a private address'],
      ['169.254.169.254', 'a link-local address'],
      ['fe80::1', 'a link-local address'],
      ['0.0.0.0', 'an unspecified address'],
      ['::', 'an unspecified address'],
    ] as const) {
      assert.equal(blockedAddressKind(address), kind, address);
    }
    // Carrier-grade NAT, multicast, broadcast, NAT64 and 6to4 (which embed an IPv4 address), documentation.
    for (const address of [
      '100.64.0.1',
      '224.0.0.1',
      '255.255.255.255',
      '64:ff9b::a00:1',
      '2002:a00:1::',
      '192.0.2.1',
    ]) {
      assert.match(blockedAddressKind(address) ?? '', /^a non-public \(\w+\) address$/, address);
    }
  });

  it('refuses a name when any address it resolves to is not public', async () => {
    const problem = await callbackUrlProblem('https://hooks.example.com/x', {
      allowPrivate: false,
      lookup: async () => ['93.184.215.14', '10.1.2.3'],
    });
    assert.equal(
      problem,
      'the host hooks.example.com resolves to 10.1.2.3, a private address; callbacks to private addresses are refused',
    );
    assert.equal(
      await callbackUrlProblem('https://hooks.example.com/x', {
        allowPrivate: false,
        lookup: async () => ['93.184.215.14'],
      }),
      null,
    );
    const missing = Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
    assert.equal(
      await callbackUrlProblem('https://nowhere.invalid/x', {
        allowPrivate: false,
        lookup: async () => {
          throw missing;
        },
      }),
      'the host nowhere.invalid does not resolve (ENOTFOUND)',
    );
  });

  it('checks the scheme even with allowPrivate, and nothing else then', async () => {
    assert.equal(await callbackUrlProblem('http://127.0.0.1:9/x', { allowPrivate: true }), null);
    assert.equal(
      await callbackUrlProblem('file:///etc/passwd', { allowPrivate: true }),
      'must be an http: or https: URL, got file:',
    );
    assert.equal(
      await callbackUrlProblem('not a url', { allowPrivate: false }),
      'must be an absolute http: or https: URL',
    );
  });

  it('refuses at connect time a name that resolves to loopback, as one address or all of them', async () => {
    for (const all of [true, false]) {
      const error = await new Promise<NodeJS.ErrnoException | null>((resolve) =>
        guardedLookup('localhost', { all }, (failure) => resolve(failure)),
      );
      assert.equal(error?.code, 'EPRIVATEADDRESS');
      assert.match(error?.message ?? '', /^the host localhost resolves to [0-9a-f:.]+, a loopback address/);
    }
  });
});
