import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';
import { readDemoConfig } from './demo.config.js';

async function bootstrap(): Promise<void> {
  const config = readDemoConfig(process.env);
  const app = await NestFactory.create(AppModule.register(config));
  app.enableShutdownHooks();
  await app.listen(config.port);
  // Only the host: the URL may carry a password.
  const store = config.redisUrl ? `Redis at ${new URL(config.redisUrl).host}` : 'the embedded memory store';
  Logger.log(`Demo listening on http://localhost:${config.port}, locks on ${store}`, 'Demo');
}

await bootstrap();
