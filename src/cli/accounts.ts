/**
 * The customer commands: accounts (create, list, set-password, set-plan,
 * suspend, reactivate, backup) and keys (create, list, revoke, allow), on the
 * customer store: the data folder's, or the Redis store of --store /
 * IPR_STORE (store/open.ts). Customers' text (emails, key names) reaches the
 * terminal only through terminalSafe (text.ts), in lines as in tables.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline/promises';
import { IprError } from '../errors.js';
import { loadPlans } from '../plans.js';
import { AccountStore } from '../store/accounts.js';
import { openCustomerStore } from '../store/open.js';
import { redactStoreUrl } from '../store/redis-connection.js';
import type { CustomerStore } from '../store/types.js';
import { dataDirOf, integerOption, listOption, options, STORE_OPTION, storeUrlOf, UsageError, type Command } from './args.js';
import { formatBytes, table } from './output.js';
import { terminalSafe } from '../text.js';

async function readPassword(): Promise<string> {
  if (process.stdin.isTTY) {
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    const answer = await rl.question('password: ');
    rl.close();
    return answer;
  }
  return readFileSync(0, 'utf8').replace(/\r?\n$/, '');
}

function requirePlan(plan: string | undefined): string {
  if (!plan) throw new UsageError('--plan P is required');
  const plans = loadPlans();
  if (!plans.has(plan)) throw new UsageError(`unknown plan "${plan}" (plans: ${[...plans.keys()].join(', ')})`);
  return plan;
}

/** Runs `action` on the command's customer store, closing it afterwards. */
async function withStore<T>(values: { data?: string; store?: string }, action: (store: CustomerStore) => Promise<T>): Promise<T> {
  const store = await openCustomerStore(dataDirOf(values), storeUrlOf(values));
  try {
    return await action(store);
  } finally {
    await store.close();
  }
}

/**
 * `ipr accounts backup --out DIR`: a copy of the account store made while it
 * is in use, into a new folder (written under a partial name, then renamed,
 * so DIR holds a whole backup or nothing).
 */
async function backup(args: string[]): Promise<number> {
  const { values } = options(args, { out: { type: 'string' }, ...STORE_OPTION });
  const url = storeUrlOf(values);
  if (url !== undefined) {
    throw new IprError('backup_failed', `accounts backup copies the account store of a data folder; the customers here are in Redis (${redactStoreUrl(url)}): back it up with Redis's own tools (its RDB snapshots or append-only file)`);
  }
  const out = values.out;
  if (!out) throw new UsageError('accounts backup needs --out DIR (a folder that does not exist yet)');
  const store = path.join(dataDirOf(values), 'accounts', 'data.mdb');
  if (!existsSync(store)) throw new IprError('backup_failed', `${store} does not exist: no account store to back up`);
  if (existsSync(out)) throw new IprError('backup_failed', `${out} exists; a backup goes into a new folder`);
  const partial = `${out}.${process.pid}.partial`;
  try {
    mkdirSync(partial);
    // Only the data folder's store is copied here (a Redis store was refused above).
    const accounts = new AccountStore(dataDirOf(values));
    try {
      await accounts.backup(partial);
    } finally {
      await accounts.close();
    }
    renameSync(partial, out);
  } catch (error) {
    rmSync(partial, { recursive: true, force: true });
    if (error instanceof IprError) throw error;
    throw new IprError('backup_failed', `${out}: ${(error as Error).message}`);
  }
  const bytes = statSync(path.join(out, 'data.mdb')).size;
  process.stdout.write(`backed up the account store of ${dataDirOf(values)} to ${path.join(out, 'data.mdb')} (${formatBytes(bytes)})\n`);
  return 0;
}

/** When an ISO time was, as the tables show it (UTC, to the second). */
function shownTime(iso: string): string {
  return iso.slice(0, 19).replace('T', ' ');
}

async function accounts(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  if (action === 'backup') return backup(rest);
  const { values } = options(rest, { email: { type: 'string' }, plan: { type: 'string' }, ...STORE_OPTION });
  if (action === 'list') {
    const rows = await withStore(values, async (store) =>
      Promise.all(
        (await store.listAccounts()).map(async (a) => [a.email, a.plan, a.status, shownTime(a.created), (await store.listKeys(a.email)).filter((k) => k.revoked === null).length]),
      ),
    );
    process.stdout.write(`${table([['email', 'plan', 'status', 'created (UTC)', 'active keys'], ...rows], 4)}\n`);
    return 0;
  }
  const email = values.email;
  if (!email) throw new UsageError(`accounts ${action ?? ''} needs --email E`);
  if (!['create', 'set-password', 'set-plan', 'suspend', 'reactivate'].includes(action ?? '')) throw new UsageError(`unknown accounts command "${action ?? ''}"`);
  const plan = action === 'create' || action === 'set-plan' ? requirePlan(values.plan) : '';
  const line = await withStore(values, async (store) => {
    if (action === 'create') {
      const account = await store.createAccount(email, await readPassword(), plan);
      return `created account ${terminalSafe(account.email)} (plan ${account.plan})`;
    }
    if (action === 'set-password') {
      const account = await store.setPassword(email, await readPassword());
      return `${terminalSafe(account.email)}: password set; every dashboard session ended`;
    }
    if (action === 'set-plan') {
      const account = await store.setPlan(email, plan);
      return `${terminalSafe(account.email)}: plan ${account.plan}`;
    }
    const account = await store.setStatus(email, action === 'suspend' ? 'suspended' : 'active');
    return `${terminalSafe(account.email)}: ${account.status}`;
  });
  process.stdout.write(`${line}\n`);
  return 0;
}

async function keys(args: string[]): Promise<number> {
  const [action, ...rest] = args;
  const { values } = options(rest, {
    account: { type: 'string' },
    name: { type: 'string' },
    count: { type: 'string' },
    allow: { type: 'string' },
    prefix: { type: 'string' },
    from: { type: 'string' },
    ...STORE_OPTION,
  });
  const email = values.account;
  if (!email) throw new UsageError(`keys ${action ?? ''} needs --account E`);
  switch (action) {
    case 'create': {
      const name = values.name;
      if (!name) throw new UsageError('keys create needs --name N');
      const count = integerOption(values.count, '--count', 1, 1)!;
      const names = Array.from({ length: count }, (_, i) => (count === 1 ? name : `${name} ${i + 1}`));
      const made = await withStore(values, (store) => store.createKeys(email, names, listOption(values.allow)));
      made.forEach(({ record }, i) =>
        process.stderr.write(`created key ${record.prefix} "${terminalSafe(record.name)}" for ${terminalSafe(record.account)}${i === 0 ? '; it is shown once, now:' : ''}\n`),
      );
      process.stdout.write(`${made.map((m) => m.key).join('\n')}\n`);
      return 0;
    }
    case 'list': {
      const now = Date.now();
      const rows = await withStore(values, async (store) =>
        Promise.all(
          (await store.listKeys(email)).map(async (k) => {
            const today = await store.keyToday(k, now);
            return [
              k.prefix,
              k.name,
              shownTime(k.created),
              today.lastUsed ? shownTime(today.lastUsed) : 'never',
              k.revoked ? `revoked ${k.revoked.slice(0, 10)}` : 'active',
              today.requests,
              k.allowed.join(',') || 'anywhere',
            ];
          }),
        ),
      );
      process.stdout.write(`${table([['prefix', 'name', 'created (UTC)', 'last used (UTC)', 'status', 'today', 'allowed from'], ...rows], 99)}\n`);
      return 0;
    }
    case 'revoke': {
      const prefix = values.prefix;
      if (!prefix) throw new UsageError('keys revoke needs --prefix P');
      const record = await withStore(values, (store) => store.revokeKey(email, prefix));
      process.stdout.write(`revoked key ${record.prefix} "${terminalSafe(record.name)}"\n`);
      return 0;
    }
    case 'allow': {
      const prefix = values.prefix;
      if (!prefix || values.from === undefined) throw new UsageError('keys allow needs --prefix P --from CIDR,...');
      const record = await withStore(values, (store) => store.setAllowed(email, prefix, listOption(values.from)));
      process.stdout.write(`key ${record.prefix} allowed from ${record.allowed.join(', ') || 'anywhere'}\n`);
      return 0;
    }
    default:
      throw new UsageError(`unknown keys command "${action ?? ''}"`);
  }
}

export const customerCommands: Command[] = [
  {
    name: 'accounts',
    usage: `accounts create --email E --plan P        (the password is read from stdin)
  accounts list
  accounts set-password --email E             (the password is read from stdin; ends the account's dashboard sessions)
  accounts set-plan --email E --plan P
  accounts suspend --email E
  accounts reactivate --email E
  accounts backup --out DIR                 (a copy of the data folder's account store, safe while it is in use)`,
    run: accounts,
  },
  {
    name: 'keys',
    usage: `keys create --account E --name N [--count K] [--allow CIDR,...]
         Prints each new key once, alone on its line, last on stdout.
  keys list --account E
  keys revoke --account E --prefix P
  keys allow --account E --prefix P --from CIDR,...   (empty: from anywhere)`,
    run: keys,
  },
];
