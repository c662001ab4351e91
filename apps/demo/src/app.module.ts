import { type DynamicModule, Module } from '@nestjs/common';
import { LockModule } from 'nest-lock';
import type { DemoConfig } from './demo.config.js';
import { JobsController } from './jobs.controller.js';

@Module({})
export class AppModule {
  static register(config: DemoConfig): DynamicModule {
    return {
      module: AppModule,
      imports: [LockModule.forRoot(config.redisUrl ? { redis: config.redisUrl } : {})],
      controllers: [JobsController],
    };
  }
}
