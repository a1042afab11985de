// The strict address parser and canonical text (docs/API.md "Addresses").
import t from 'tap';
import { canonicalAddress } from '../src/index.js';

t.test('IPv4: four decimal octets without leading zeros', async (t) => {
  for (const ip of ['0.0.0.0', '1.2.3.4', '10.0.0.1', '255.255.255.255', '192.168.100.200']) {
    t.equal(canonicalAddress(ip), ip, ip);
  }
  const rejected = [
    '010.1.1.1', // octal-looking
    '1.2.3.04',
    '1.2.3', // shortened
    '1.2',
    '16909060', // a single number
    '1.2.3.4.5',
    '256.1.1.1',
    '1.2.3.256',
    '0x1.2.3.4', // hex
    '1..2.3',
    '1.2.3.',
    '.1.2.3',
    ' 1.2.3.4', // surrounding spaces
    '1.2.3.4 ',
    '1.2.3.4\n',
    '1.2.3.4/24', // CIDR suffix
    '1.2.3.4:80',
    '１.2.3.4', // a full-width digit
    '1.2.3.4\u0000',
    '',
  ];
  for (const ip of rejected) t.equal(canonicalAddress(ip), null, JSON.stringify(ip));
});

t.test('IPv6: RFC 4291 text, RFC 5952 canonical form', async (t) => {
  const canonical: [string, string][] = [
    ['::', '::'],
    ['::1', '::1'],
    ['2001:db8::1', '2001:db8::1'],
    ['2001:DB8:0:0:0:0:0:1', '2001:db8::1'],
    ['2001:0db8:0000:0000:0000:ff00:0042:8329', '2001:db8::ff00:42:8329'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'], // of two equal runs, the first
    ['1:0:0:1:0:0:0:1', '1:0:0:1::1'], // the longest run
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1'], // a lone zero group stays
    ['2001:db8::', '2001:db8::'],
    ['fe80::1', 'fe80::1'],
    ['::1.2.3.4', '::102:304'], // IPv4-compatible: hex, not mixed
    ['1:2:3:4:5:6:1.2.3.4', '1:2:3:4:5:6:102:304'],
    ['::ffff:1.2.3.4', '::ffff:1.2.3.4'], // IPv4-mapped keeps the mixed form
    ['::FFFF:0102:0304', '::ffff:1.2.3.4'],
    ['0:0:0:0:0:ffff:1.2.3.4', '::ffff:1.2.3.4'],
    ['1:2:3:4:5:6:7::', '1:2:3:4:5:6:7:0'],
    ['::2:3:4:5:6:7:8', '0:2:3:4:5:6:7:8'],
  ];
  for (const [input, expected] of canonical) t.equal(canonicalAddress(input), expected, input);
  const rejected = [
    'fe80::1%eth0', // zone id
    'fe80::1%1',
    '[::1]',
    '2001:db8::/32',
    ':::',
    '1::2::3',
    '1:2:3:4:5:6:7:8:9',
    '1:2:3:4:5:6:7:8::',
    '1:2:3:4:5:6:7',
    '12345::',
    ':1::',
    '1::2:',
    '1:',
    ':1',
    'g::1',
    '::ffff:1.2.3',
    '::ffff:01.2.3.4',
    '::ffff:1.2.3.4:5',
    '1.2.3.4::',
    ' ::1',
    '::1 ',
    '1:2:3:4:5:6:7:1.2.3.4',
    '2001:db8:0:0:0:0:0:0:1',
  ];
  for (const ip of rejected) t.equal(canonicalAddress(ip), null, JSON.stringify(ip));
});

t.test('values that are not strings, and long strings, are not addresses', async (t) => {
  for (const value of [undefined, null, 1, 16909060, {}, [], ['1.2.3.4'], true]) {
    t.equal(canonicalAddress(value), null, String(value));
  }
  t.equal(canonicalAddress(`${'1'.repeat(100)}.2.3.4`), null);
  t.equal(canonicalAddress('1:2:3:4:5:6:7:8'.repeat(10)), null);
});
