import { BadRequestException, Body, Controller, Get, HttpCode, Post } from '@nestjs/common';
import { type LockMode, type StampedeRequest, type StampedeRun, StampedeService } from './stampede.service.js';

const MAX_REQUESTS = 1_000;

/** `POST /stampede`: the page's "Fire" button. */
@Controller('stampede')
export class StampedeController {
  constructor(private readonly stampedes: StampedeService) {}

  /** What the page needs to offer: how many processes `spread` reaches, how many requests at most. */
  @Get()
  limits(): { processes: number; maxRequests: number } {
    return { processes: this.stampedes.processes, maxRequests: MAX_REQUESTS };
  }

  /** Body: `{ n?: 100, lock?: 'on' | 'off' | 'single-flight' | 'both' | 'all', productId?, spread?: false }`. */
  @Post()
  @HttpCode(200)
  async fire(@Body() body: unknown): Promise<{ runs: StampedeRun[] }> {
    const request = parseStampedeRequest(body ?? {});
    if (request.spread && this.stampedes.processes === 1) {
      throw new BadRequestException(
        'spread needs DEMO_PEERS: the URLs of the other demo processes on the same REDIS_URL, comma-separated',
      );
    }
    return { runs: await this.stampedes.run(request) };
  }
}

function parseStampedeRequest(body: unknown): StampedeRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new BadRequestException('The body must be a JSON object');
  }
  const { n = 100, lock = 'both', productId, spread = false } = body as Record<string, unknown>;
  if (!Number.isInteger(n) || (n as number) < 1 || (n as number) > MAX_REQUESTS) {
    throw new BadRequestException(`n must be a whole number from 1 to ${MAX_REQUESTS}, got ${JSON.stringify(n)}`);
  }
  if (lock !== 'on' && lock !== 'off' && lock !== 'single-flight' && lock !== 'both' && lock !== 'all') {
    throw new BadRequestException(
      `lock must be "on", "off", "single-flight", "both" (on, then off) or "all" (the three), got ${JSON.stringify(lock)}`,
    );
  }
  if (productId !== undefined && (!Number.isSafeInteger(productId) || (productId as number) < 1)) {
    throw new BadRequestException(`productId must be a whole number from 1, got ${JSON.stringify(productId)}`);
  }
  if (typeof spread !== 'boolean') {
    throw new BadRequestException(`spread must be true or false, got ${JSON.stringify(spread)}`);
  }
  const modes: LockMode[] = lock === 'both' ? ['on', 'off'] : lock === 'all' ? ['on', 'off', 'single-flight'] : [lock];
  return {
    requests: n as number,
    modes,
    spread,
    ...(productId === undefined ? {} : { productId: productId as number }),
  };
}
