import { type DynamicModule, Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { Redis } from 'ioredis';
import { LockModule } from 'nest-lock';
import { CatalogueBackend } from './catalogue/catalogue-backend.js';
import { CatalogueController } from './catalogue/catalogue.controller.js';
import { ProductsService } from './catalogue/products.service.js';
import { ReportsService } from './catalogue/reports.service.js';
import { DEMO_CONFIG, type DemoConfig } from './demo.config.js';
import { PriceRefreshJob } from './jobs/price-refresh.job.js';
import { LeaderController } from './leader/leader.controller.js';
import { StockReportJob } from './leader/stock-report.job.js';
import { PageController } from './page/page.controller.js';
import { StampedeController } from './stampede/stampede.controller.js';
import { StampedeService } from './stampede/stampede.service.js';
import { StatsController } from './stats.controller.js';
import { DemoStorage, MemoryDemoStorage, RedisDemoStorage } from './storage/demo-storage.js';

@Module({})
export class AppModule implements OnApplicationShutdown {
  constructor(@Inject(DemoStorage) private readonly storage: DemoStorage) {}

  static register(config: DemoConfig): DynamicModule {
    return {
      module: AppModule,
      imports: [ScheduleModule.forRoot(), LockModule.forRoot(config.redisUrl ? { redis: config.redisUrl } : {})],
      controllers: [PageController, CatalogueController, StatsController, StampedeController, LeaderController],
      providers: [
        { provide: DEMO_CONFIG, useValue: config },
        {
          provide: DemoStorage,
          useFactory: () =>
            config.redisUrl ? new RedisDemoStorage(new Redis(config.redisUrl)) : new MemoryDemoStorage(),
        },
        CatalogueBackend,
        ProductsService,
        ReportsService,
        StampedeService,
        PriceRefreshJob,
        StockReportJob,
      ],
    };
  }

  async onApplicationShutdown(): Promise<void> {
    await this.storage.close();
  }
}
