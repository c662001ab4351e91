// The `nest-lock/terminus` entry point: only applications that use @nestjs/terminus load it.
export { LockHealthIndicator } from './lock-health.indicator.js';
