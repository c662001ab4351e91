import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import {
  BadRequestException,
  Controller,
  Get,
  Injectable,
  type INestApplication,
  NotFoundException,
  Param,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { InvalidArgumentError, LockModule, LockTimeoutError, SingleFlight } from 'nest-lock';
import type { Server } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import { defer, delay as delayed, Observable, of } from 'rxjs';
import request from 'supertest';
import { useRedisServer } from './support/redis-server.js';

/** Loads of the catalogue, by product, in this jest process (both applications). */
const loads = new Map<string, number>();
const counted = (id: string): void => void loads.set(id, (loads.get(id) ?? 0) + 1);

@Injectable()
class Catalogue {
  @SingleFlight('product:{0}')
  async product(id: string): Promise<{ id: string }> {
    counted(id);
    await delay(150);
    if (id === 'missing') throw new NotFoundException(`no product ${id}`);
    if (id === 'invalid') throw new BadRequestException(['id must be an integer', 'id must be positive']);
    if (id === 'busy') throw new LockTimeoutError(`stock:${id}`, 5, 5);
    if (id === 'status-200') throw Object.assign(new Error('a failure with a status property'), { status: 200 });
    return { id };
  }

  @SingleFlight('cached:{0}', { ttl: 10_000, earlyRefresh: 0 })
  async cached(id: string): Promise<{ id: string }> {
    counted(`cached:${id}`);
    await delay(50);
    return { id };
  }

  @SingleFlight('stream:{0}')
  stream(id: string): Observable<{ id: string }> {
    return defer(() => {
      counted(`stream:${id}`);
      return of({ id }).pipe(delayed(100));
    });
  }
}

@Controller('products')
class ProductsController {
  constructor(private readonly catalogue: Catalogue) {}

  // A service method under @SingleFlight called from a route: the route answers as the service does.
  @Get(':id')
  product(@Param('id') id: string) {
    return this.catalogue.product(id);
  }

  // On the route itself.
  @Get(':id/direct')
  @SingleFlight('direct:{0}')
  async direct(@Param('id') id: string) {
    counted(`direct:${id}`);
    await delay(150);
    return { id, direct: true };
  }
}

describe('@SingleFlight on routes and services, two applications on one Redis (as two pods)', () => {
  const server = useRedisServer();
  const apps: INestApplication[] = [];
  const http = (i: number) => request(apps[i].getHttpServer() as Server);

  beforeAll(async () => {
    for (let i = 0; i < 2; i++) {
      const module = await Test.createTestingModule({
        imports: [LockModule.forRoot({ redis: server().url, logger: false })],
        controllers: [ProductsController],
        providers: [Catalogue],
      }).compile();
      const app = module.createNestApplication({ logger: false });
      await app.init();
      apps.push(app);
    }
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
  });

  it('a service method called from a route: 20 requests over both pods, one load, every answer 200', async () => {
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => http(i % 2).get('/products/a')));
    expect(answers.map((answer) => answer.status)).toEqual(Array(20).fill(200));
    expect(answers.map((answer) => answer.body as unknown)).toEqual(Array(20).fill({ id: 'a' }));
    expect(loads.get('a')).toBe(1);
  });

  it('on the route itself: one load for both pods', async () => {
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => http(i % 2).get('/products/b/direct')));
    expect(answers.map((answer) => answer.status)).toEqual(Array(10).fill(200));
    expect(loads.get('direct:b')).toBe(1);
  });

  it("the loader's HttpException answers the same on both pods: 404 with its message", async () => {
    const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => http(i % 2).get('/products/missing')));
    expect(answers.map((answer) => answer.status)).toEqual(Array(6).fill(404));
    expect(new Set(answers.map((answer) => JSON.stringify(answer.body)))).toEqual(
      new Set([JSON.stringify({ message: 'no product missing', error: 'Not Found', statusCode: 404 })]),
    );
    expect(loads.get('missing')).toBe(1);
  });

  it('an HttpException with its own body answers with that body on both pods (a validation error)', async () => {
    const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => http(i % 2).get('/products/invalid')));
    expect(answers.map((answer) => answer.status)).toEqual(Array(6).fill(400));
    // Before: the other pod answered {"statusCode":400,"message":"Bad Request Exception"}.
    expect(new Set(answers.map((answer) => JSON.stringify(answer.body)))).toEqual(
      new Set([
        JSON.stringify({
          message: ['id must be an integer', 'id must be positive'],
          error: 'Bad Request',
          statusCode: 400,
        }),
      ]),
    );
    expect(loads.get('invalid')).toBe(1);
  });

  it('found by a second outside review: a nest-lock error of the method answers its status on both pods (409)', async () => {
    const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => http(i % 2).get('/products/busy')));
    // Before: 409 where the method ran, 500 on the other pod.
    expect(answers.map((answer) => answer.status)).toEqual(Array(6).fill(409));
    for (const answer of answers) expect(answer.body).toMatchObject({ statusCode: 409, code: 'LOCK_TIMEOUT' });
    expect(loads.get('busy')).toBe(1);
  });

  it('found by a second outside review: an error with a status property but no HttpException answers 500 on both pods', async () => {
    const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => http(i % 2).get('/products/status-200')));
    // Before: 500 where the method ran, 200 (a failed load!) with its message on the other pod.
    expect(answers.map((answer) => answer.status)).toEqual(Array(6).fill(500));
    expect(new Set(answers.map((answer) => JSON.stringify(answer.body)))).toEqual(
      new Set([JSON.stringify({ statusCode: 500, message: 'Internal server error' })]),
    );
    expect(loads.get('status-200')).toBe(1);
  });

  it('a method returning an Observable shares its last value, lazily: nothing runs until subscribed', async () => {
    const catalogue = apps[0].get(Catalogue);
    const other = apps[1].get(Catalogue);
    const streams = [catalogue.stream('s'), other.stream('s'), catalogue.stream('s')];
    await delay(50);
    expect(loads.get('stream:s')).toBeUndefined();
    const values = await Promise.all(
      streams.map((stream) => new Promise((resolve, reject) => stream.subscribe({ next: resolve, error: reject }))),
    );
    expect(values).toEqual([{ id: 's' }, { id: 's' }, { id: 's' }]);
    expect(loads.get('stream:s')).toBe(1);
  });

  it('with a cache ttl, reads through: the second pod finds the value cached', async () => {
    expect(await apps[0].get(Catalogue).cached('c')).toEqual({ id: 'c' });
    expect(await apps[1].get(Catalogue).cached('c')).toEqual({ id: 'c' });
    expect(loads.get('cached:c')).toBe(1);
  });

  it('refuses bad options when the class is defined', () => {
    expect(() => SingleFlight('k', { tll: 5 } as never)).toThrow(InvalidArgumentError);
    expect(() => SingleFlight('k', { ttl: 0 })).toThrow(InvalidArgumentError);
    expect(() => SingleFlight('k', { signal: new AbortController().signal } as never)).toThrow(InvalidArgumentError);
    expect(() => {
      class Bad {
        @SingleFlight('k:{3}')
        async run(id: string): Promise<string> {
          return id;
        }
      }
      return Bad;
    }).toThrow(InvalidArgumentError);
  });
});
