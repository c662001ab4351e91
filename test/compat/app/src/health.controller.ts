// The README's health check, compiled in both applications: `nest-lock/terminus` must resolve
// with its types under `module: commonjs` (no `exports` support) as well as `nodenext`.
import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { LockHealthIndicator } from 'nest-lock/terminus';

@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly lock: LockHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.lock.pingCheck('lock')]);
  }
}
