/**
 * The customer store a command or a server is told to use: the Redis store
 * of a store URL (`--store URL`, `IPR_STORE`), else the embedded LMDB store
 * of the data folder, as before there was a choice.
 */
import { LmdbCustomerStore } from './lmdb.js';
import { RedisCustomerStore } from './redis.js';

/** Opens the store of `url` (redis-connection.ts says its forms), or of `dataDir` when there is none; throws IprError invalid_argument, store_unavailable. */
export async function openCustomerStore(dataDir: string, url: string | undefined): Promise<LmdbCustomerStore | RedisCustomerStore> {
  return url === undefined ? LmdbCustomerStore.open(dataDir) : RedisCustomerStore.open(url);
}
