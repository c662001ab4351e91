import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { LockModuleOptions } from './lock-module.options.js';

export const {
  ConfigurableModuleClass,
  MODULE_OPTIONS_TOKEN: LOCK_MODULE_OPTIONS,
  OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<LockModuleOptions>({ moduleName: 'Lock' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createLockOptions')
  .setExtras({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();
