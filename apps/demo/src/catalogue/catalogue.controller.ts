import {
  BadGatewayException,
  Controller,
  Delete,
  Get,
  HttpCode,
  NotFoundException,
  Param,
  ParseIntPipe,
  Post,
  Query,
} from '@nestjs/common';
import { LoaderError } from 'nest-lock';
import { BackendFailure, CatalogueBackend, type Product } from './catalogue-backend.js';
import { type MissMode, ProductsService } from './products.service.js';
import { ReportsService } from './reports.service.js';

// The decorated methods live in ReportsService: LockModule answers their errors with 409 / 503 here too.
@Controller()
export class CatalogueController {
  constructor(
    private readonly products: ProductsService,
    private readonly reports: ReportsService,
    private readonly backend: CatalogueBackend,
  ) {}

  /**
   * `?lock=off` skips the cache-miss lock for this request, to show the stampede; `?lock=on` takes it
   * even under `DEMO_LOCK=off`; `?lock=single-flight` loads once for every request that missed.
   */
  @Get('products/:id')
  async product(@Param('id', ParseIntPipe) id: number, @Query('lock') lock?: string): Promise<Product> {
    let product: Product | null;
    try {
      product = await this.products.findProduct(id, missModeOf(lock));
    } catch (error) {
      // A failure of a load in another process (single-flight) arrives as a LoaderError of that name.
      const backendFailed =
        error instanceof BackendFailure || (error instanceof LoaderError && error.name === 'BackendFailure');
      if (backendFailed) throw new BadGatewayException(error.message, { cause: error });
      throw error;
    }
    if (product === null) throw new NotFoundException(`There is no product ${id}`);
    return product;
  }

  @Delete('cache/:id')
  @HttpCode(204)
  async evict(@Param('id', ParseIntPipe) id: number): Promise<void> {
    await this.products.evict(id);
  }

  /** Makes the backend fail for one id (`DELETE` to heal it), in this process. */
  @Post('backend/failures/:id')
  @HttpCode(204)
  failLoads(@Param('id', ParseIntPipe) id: number): void {
    this.backend.failLoadsOf(id, true);
  }

  @Delete('backend/failures/:id')
  @HttpCode(204)
  healLoads(@Param('id', ParseIntPipe) id: number): void {
    this.backend.failLoadsOf(id, false);
  }

  @Post('reports')
  createReport() {
    return this.reports.createReport();
  }

  @Post('reindex')
  reindex() {
    return this.reports.reindex();
  }
}

function missModeOf(lock: string | undefined): MissMode | undefined {
  return lock === 'on' || lock === 'off' || lock === 'single-flight' ? lock : undefined;
}
