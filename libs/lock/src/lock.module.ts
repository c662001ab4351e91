import type { Redis } from 'ioredis';
import { type DynamicModule, Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { APP_INTERCEPTOR, DiscoveryModule } from '@nestjs/core';
import { LockInterceptor } from './http/lock.interceptor.js';
import { LeaderService } from './leader/leader.service.js';
import { SingleFlightService } from './single-flight/single-flight.service.js';
import { LeaseEngine } from './lease/lease-engine.js';
import { Watchdog } from './lease/watchdog.js';
import { createLockLogger } from './lock-logger.js';
import { LOCK_OPTIONS, SHUTDOWN_GRACE_MS } from './lock.constants.js';
import type { LockLostError } from './lock.errors.js';
import { ConfigurableModuleClass, LOCK_MODULE_OPTIONS, type OPTIONS_TYPE } from './lock.module-definition.js';
import { type LockModuleOptions, resolveModuleOptions, type ResolvedModuleOptions } from './lock-module.options.js';
import { isRedisClient } from './store/redis/redis-options.js';
import { LockService } from './lock.service.js';
import { SemaphoreService } from './semaphore.service.js';
import { MemoryStore } from './store/memory/memory.store.js';
import { connectModuleClient } from './store/redis/client.js';
import { RedisStore } from './store/redis/redis.store.js';
import { RedlockStore } from './store/redlock/redlock.store.js';
import { LockStore } from './store/store.js';
import { LockTelemetry } from './telemetry/telemetry.js';

@Module({
  // LeaderService finds the `@LeaderOnly` methods of the application's providers at bootstrap.
  imports: [DiscoveryModule],
  providers: [
    {
      provide: LOCK_OPTIONS,
      useFactory: (options: LockModuleOptions) => resolveModuleOptions(options),
      inject: [LOCK_MODULE_OPTIONS],
    },
    { provide: LockStore, useFactory: createStore, inject: [LOCK_OPTIONS] },
    { provide: LeaseEngine, useFactory: createEngine, inject: [LockStore, LOCK_OPTIONS, LockTelemetry] },
    { provide: LockTelemetry, useFactory: () => LockTelemetry.create() },
    LockService,
    SemaphoreService,
    LeaderService,
    SingleFlightService,
    // nest-lock's errors as HTTP answers wherever they surface in a request (off with httpErrors: false).
    { provide: APP_INTERCEPTOR, useClass: LockInterceptor },
  ],
  exports: [LockService, SemaphoreService, LeaderService, SingleFlightService, LockStore, LOCK_OPTIONS],
})
export class LockModule extends ConfigurableModuleClass implements OnApplicationShutdown {
  constructor(
    @Inject(LockStore) private readonly store: LockStore,
    @Inject(LeaseEngine) private readonly engine: LeaseEngine,
    @Inject(LOCK_OPTIONS) private readonly options: ResolvedModuleOptions,
  ) {
    super();
  }

  /**
   * Without `redis`: the embedded memory store — quietly with `store: 'memory'`, else with a
   * warning at start that locks are process-local.
   */
  static override forRoot(options: typeof OPTIONS_TYPE = {}): DynamicModule {
    return super.forRoot(options);
  }

  /** After every module's onModuleDestroy, so that those may still release their locks. */
  async onApplicationShutdown(): Promise<void> {
    const ownStore = typeof this.options.store !== 'object';
    // Leases kept after their routine (`holdAtLeast`) are released now, and no more are put off.
    await this.engine.leaves.leaveAllNow();
    // Routines still running under withLock / withPermit / a decorator get a moment to finish and
    // release; closing the store under them would leave their leases held for a whole ttl.
    await this.engine.watchdog.drain(SHUTDOWN_GRACE_MS);
    this.engine.close();
    // A store passed in is its owner's to close, as a Redis client passed in is.
    if (ownStore) await this.store.close();
  }
}

/** The lease core of the module, on its store: losses are counted, logged and passed to `onLockLost`. */
function createEngine(store: LockStore, options: ResolvedModuleOptions, telemetry: LockTelemetry): LeaseEngine {
  const { onLockLost } = options;
  // What the user's hook returns goes back to the watchdog, which catches a rejection.
  const reportLost = (error: LockLostError): unknown => {
    telemetry.leaseLost(error);
    return onLockLost?.(error);
  };
  const watchdog = new Watchdog(store, reportLost, createLockLogger(options.logger, 'nest-lock'));
  return new LeaseEngine(store, watchdog, telemetry, options.commandTimeout);
}

async function createStore({
  redis,
  redlock,
  store,
  keyPrefix,
  commandTimeout,
  waitForReplicas,
  fenceCounterTtl,
  logger: loggerOption,
}: ResolvedModuleOptions): Promise<LockStore> {
  if (typeof store === 'object') return store;
  const logger = createLockLogger(loggerOption, 'LockModule');
  if (redlock !== undefined) {
    const { nodes, quorum, driftFactor, quarantine } = redlock;
    const clients = await Promise.all(
      nodes.map(async (node): Promise<Redis> => (isRedisClient(node) ? node : connectModuleClient(node, logger))),
    );
    const ownsClients = nodes.map((node) => !isRedisClient(node));
    return new RedlockStore(clients, {
      keyPrefix,
      commandTimeout,
      quorum,
      driftFactor,
      quarantine,
      ownsClients,
      fenceCounterTtl,
    });
  }
  if (redis === undefined) {
    if (store !== 'memory') {
      logger.warn(
        'No redis configured (an unset REDIS_URL?): using the embedded memory store, locks are process-local. ' +
          "store: 'redis' makes a missing redis option fail at start; store: 'memory' says the memory store is on purpose",
      );
    }
    return new MemoryStore();
  }
  if (isRedisClient(redis)) {
    return new RedisStore(redis, { keyPrefix, commandTimeout, ownsClient: false, waitForReplicas, fenceCounterTtl });
  }
  const client = await connectModuleClient(redis, logger);
  return new RedisStore(client, { keyPrefix, commandTimeout, ownsClient: true, waitForReplicas, fenceCounterTtl });
}
