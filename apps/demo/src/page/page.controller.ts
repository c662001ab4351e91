import { Controller, Get, Header } from '@nestjs/common';
import { DEMO_PAGE } from './demo-page.js';

@Controller()
export class PageController {
  @Get()
  @Header('Content-Type', 'text/html; charset=utf-8')
  page(): string {
    return DEMO_PAGE;
  }
}
