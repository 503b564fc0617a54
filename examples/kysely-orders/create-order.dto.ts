import { IsInt, IsNotEmpty, IsString, Max, Min } from 'class-validator';

/** `POST /orders`: checked by the global `ValidationPipe` (400 before anything is claimed). */
export class CreateOrderDto {
  @IsString()
  @IsNotEmpty()
  sku!: string;

  @IsInt()
  @Min(1)
  @Max(1_000_000)
  quantity!: number;
}
